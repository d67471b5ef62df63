// json_checked.cpp - see json_checked.h.
#include "core/json_checked.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <vector>

#include "core/error.h"

namespace halfgrad::json_checked {

using nlohmann::json;

namespace {

// Printable ASCII as is, everything else as \xNN: untrusted bytes never reach a terminal raw.
void append_printable(std::string& out, const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(p[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
}

// "field 'model.width'" or "the top level".
std::string label(const std::string& path) { return path.empty() ? "the top level" : "field '" + path + "'"; }

}  // namespace

int nesting_depth(const char* data, size_t n, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = data[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return limit + 1;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

json parse(const char* data, size_t n, const std::string& where, const ParseLimits& limits) {
  HG_CHECK(n <= limits.max_bytes, where << ": JSON text of " << n << " bytes exceeds the limit of " << limits.max_bytes
                                        << " bytes; expected a smaller document");
  HG_CHECK(nesting_depth(data, n, limits.max_depth) <= limits.max_depth,
           where << ": JSON nests arrays/objects more than " << limits.max_depth
                 << " levels deep; expected at most " << limits.max_depth);
  try {
    if (!limits.reject_duplicate_keys) return json::parse(data, data + n);
    // One set of keys per open object; the callback sees every key before its value.
    std::vector<std::set<std::string>> open_keys;
    const json::parser_callback_t check_keys = [&](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) open_keys.emplace_back();
      else if (event == json::parse_event_t::object_end && !open_keys.empty()) open_keys.pop_back();
      else if (event == json::parse_event_t::key && !open_keys.empty()) {
        HG_CHECK(open_keys.back().insert(parsed.get_ref<const std::string&>()).second,
                 where << ": key " << preview(parsed) << " appears twice in one object; expected unique keys");
      }
      return true;
    };
    return json::parse(data, data + n, check_keys);
  } catch (const json::parse_error& e) {
    // e.byte is 1-based: the byte at which the parser stopped. Show up to 40 bytes before it.
    const size_t at = std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, n);
    const size_t from = at > 40 ? at - 40 : 0;
    std::string excerpt;
    append_printable(excerpt, data + from, std::min<size_t>(at - from + 1, n - from));
    HG_FAIL(where << ": not valid JSON: syntax error near byte " << at << " of " << n << " (`" << excerpt
                  << "`); expected a JSON document");
  } catch (const json::exception& e) {
    // out_of_range.406 (a number beyond double's range) and the like: nlohmann's id, not its text.
    HG_FAIL(where << ": not valid JSON (nlohmann error id " << e.id << ": a number out of range or similar)");
  }
}

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::binary: return "binary";
    case json::value_t::discarded: return "discarded";
  }
  return "?";
}

std::string preview(const json& j, size_t max_chars) {
  if (j.is_array()) return "an array of " + std::to_string(j.size()) + " elements";
  if (j.is_object()) return "an object of " + std::to_string(j.size()) + " keys";
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    std::string out = "\"";
    append_printable(out, s.data(), std::min(s.size(), max_chars));
    return out + (s.size() > max_chars ? "...\"" : "\"");
  }
  if (j.is_binary()) return "binary data";
  return j.dump();  // null, boolean or number: short, and never nested
}

// ---- Field -------------------------------------------------------------------------------------------

Field::Field(const json& j, std::string where, std::string path)
    : j_(&j), where_(std::move(where)), path_(std::move(path)) {}

void Field::fail(const std::string& what) const { HG_FAIL(where_ << ": " << label(path_) << " " << what); }

void Field::wrong_type(const char* expected) const {
  fail(std::string("must be ") + expected + ", got " + type_name(*j_) +
       (j_->is_array() || j_->is_object() ? "" : " " + preview(*j_)));
}

const Field& Field::require_object(const char* what) const {
  if (!j_->is_object()) wrong_type(what);
  return *this;
}

const Field& Field::require_array(const char* what) const {
  if (!j_->is_array()) wrong_type(what);
  return *this;
}

bool Field::has(const std::string& key, bool null_is_absent) const {
  require_object();
  auto it = j_->find(key);
  return it != j_->end() && !(null_is_absent && it->is_null());
}

Field Field::operator[](const std::string& key) const {
  require_object();
  const std::string child = path_.empty() ? key : path_ + "." + key;
  auto it = j_->find(key);
  if (it == j_->end()) Field(*j_, where_, child).fail("is missing");
  return Field(*it, where_, child);
}

Field Field::operator[](size_t i) const {
  require_array();
  const std::string child = path_ + "[" + std::to_string(i) + "]";
  if (i >= j_->size()) Field(*j_, where_, child).fail("is missing (the array has " + std::to_string(j_->size()) + " elements)");
  return Field((*j_)[i], where_, child);
}

size_t Field::size() const {
  if (!j_->is_array() && !j_->is_object()) wrong_type("an array or an object");
  return j_->size();
}

int64_t Field::as_int() const {
  if (!j_->is_number_integer()) wrong_type("an integer");
  if (j_->is_number_unsigned() && j_->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail("is " + j_->dump() + "; expected an integer below 2^63");
  return j_->get<int64_t>();
}

int64_t Field::as_int(int64_t lo, int64_t hi) const {
  const int64_t v = as_int();
  if (v < lo || v > hi) fail("is " + std::to_string(v) + "; expected an integer in [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "]");
  return v;
}

double Field::as_number() const {
  if (!j_->is_number()) wrong_type("a number");
  const double v = j_->get<double>();
  if (!std::isfinite(v)) fail("is not finite; expected a finite number");
  return v;
}

bool Field::as_bool() const {
  if (!j_->is_boolean()) wrong_type("a boolean");
  return j_->get<bool>();
}

std::string Field::as_string() const {
  if (!j_->is_string()) wrong_type("a string");
  return j_->get<std::string>();
}

std::vector<int64_t> Field::as_int_list() const {
  require_array("an array of integers");
  std::vector<int64_t> out;
  for (size_t i = 0; i < j_->size(); ++i) out.push_back((*this)[i].as_int());
  return out;
}

std::vector<double> Field::as_number_list() const {
  require_array("an array of numbers");
  std::vector<double> out;
  for (size_t i = 0; i < j_->size(); ++i) out.push_back((*this)[i].as_number());
  return out;
}

std::vector<std::string> Field::as_string_list() const {
  require_array("an array of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < j_->size(); ++i) out.push_back((*this)[i].as_string());
  return out;
}

}  // namespace halfgrad::json_checked
