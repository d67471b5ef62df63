// json_checked.h - JSON read from files we do not trust (checkpoint metadata, an MSD dataset.json):
// bounded parsing, and typed field access whose errors name the file and the field.
//
// Why not nlohmann::json directly: its parser and dump() recurse once per nesting level, so a
// crafted 100,000-deep array overflows the stack (SIGSEGV, not an exception), and its exception
// texts ("[json.exception.type_error.302] type must be number, but is string") say neither which
// file nor which field. Here:
//   - parse() refuses text longer than a byte cap, and text nested deeper than a depth cap, by a
//     linear pre-scan of the brackets outside strings, before nlohmann sees a byte of it;
//   - a syntax error becomes "<where>: not valid JSON: syntax error near byte N (`<40 printable
//     bytes>`)", never nlohmann's message;
//   - Field walks the document with a dotted path ("model.channels[2]") and throws
//     "<where>: field 'model.width' must be an integer, got string" on a missing key or a wrong type;
//   - preview() shows at most a bounded prefix of a value (arrays and objects only by their size),
//     so no error message ever carries a dump of untrusted input.
// Every error is a halfgrad::Error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace halfgrad::json_checked {

struct ParseLimits {
  size_t max_bytes = size_t{64} << 20;  // longer text is refused before parsing
  int max_depth = 64;                   // deeper nesting of arrays/objects is refused before parsing
  /// Refuse an object that holds the same key twice (nlohmann would keep the last one silently: a
  /// dataset.json with two "training" lists, a safetensors header naming a tensor twice). On for
  /// every file halfgrad reads; off only for text whose duplicates are known to be harmless.
  bool reject_duplicate_keys = true;
};

/// The deepest nesting of arrays and objects in `n` bytes of JSON text (brackets inside strings do
/// not count), scanning only until the depth exceeds `limit` (then returns limit + 1). Malformed
/// text gives some depth; parse() reports the syntax error.
int nesting_depth(const char* data, size_t n, int limit);

/// Parses `n` bytes as one JSON document. Throws halfgrad::Error starting "<where>: " when the text
/// is longer than limits.max_bytes, nests deeper than limits.max_depth, or is not valid JSON
/// (including invalid UTF-8 and numbers out of double's range), or, with
/// limits.reject_duplicate_keys, when an object repeats a key ("<where>: key \"k\" appears twice
/// in one object").
nlohmann::json parse(const char* data, size_t n, const std::string& where, const ParseLimits& limits);

/// "null", "boolean", "integer", "number" (a float), "string", "array", "object", "binary".
const char* type_name(const nlohmann::json& j);

/// At most about `max_chars` characters describing j: a scalar as JSON text (a long string cut
/// with "..."; bytes outside printable ASCII as \xNN), an array or object only as its size
/// ("an array of 3 elements"). Never recursive.
std::string preview(const nlohmann::json& j, size_t max_chars = 60);

/// A value inside an untrusted document, with the file it came from (`where`, e.g. the path of
/// model.safetensors) and its path in the document ("model.channels[2]"; "" for the top level).
/// Accessors check the type and throw halfgrad::Error
///   "<where>: field '<path>' must be <type>, got <type>"      (wrong type)
///   "<where>: field '<path>' is missing; expected <type>"       (absent key)
///   "<where>: field '<path>' is <value>; expected <range>"     (an integer outside a range)
/// The referenced json must outlive the Field.
class Field {
 public:
  Field(const nlohmann::json& j, std::string where, std::string path = "");

  const nlohmann::json& value() const { return *j_; }
  const std::string& path() const { return path_; }
  const std::string& where() const { return where_; }

  /// Throws unless this is an object / an array (`what` describes the expected content).
  const Field& require_object(const char* what = "an object") const;
  const Field& require_array(const char* what = "an array") const;
  /// Object only: whether `key` is present (and not null, when null_is_absent).
  bool has(const std::string& key, bool null_is_absent = false) const;
  /// Object member `key`; throws when this is not an object or the key is absent.
  Field operator[](const std::string& key) const;
  /// Array element i; throws when this is not an array or i is out of range.
  Field operator[](size_t i) const;
  /// Elements of an array / members of an object.
  size_t size() const;

  int64_t as_int() const;
  /// as_int, checked to lie in [lo, hi].
  int64_t as_int(int64_t lo, int64_t hi) const;
  /// An integer or a float, finite.
  double as_number() const;
  bool as_bool() const;
  std::string as_string() const;
  std::vector<int64_t> as_int_list() const;
  std::vector<double> as_number_list() const;
  std::vector<std::string> as_string_list() const;

  /// Throws "<where>: field '<path>' <what>".
  [[noreturn]] void fail(const std::string& what) const;

 private:
  [[noreturn]] void wrong_type(const char* expected) const;
  const nlohmann::json* j_;
  std::string where_, path_;
};

}  // namespace halfgrad::json_checked
