# fuzz.cmake - the libFuzzer harnesses of fuzz/ and the program that writes their seed corpora.
# Included by the top CMakeLists.txt before any target, because HALFGRAD_FUZZ instruments every
# target of its build (a build folder of its own: tools/fuzz.sh configures it with clang and
# -DHALFGRAD_CUDA=OFF and builds only the harnesses and the layers they link).

# Any build, on demand: cmake --build build --target make_fuzz_corpus && build/make_fuzz_corpus fuzz/corpus
add_executable(make_fuzz_corpus EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/make_corpus.cpp)
target_include_directories(make_fuzz_corpus PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(make_fuzz_corpus PRIVATE halfgrad_nn halfgrad_io)

option(HALFGRAD_FUZZ "Build the libFuzzer harnesses of fuzz/ (clang, CPU only; sanitizers on every target)" OFF)
if(HALFGRAD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "HALFGRAD_FUZZ needs clang's libFuzzer: configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(HALFGRAD_CUDA)
    message(FATAL_ERROR "HALFGRAD_FUZZ is a CPU-only build: configure with -DHALFGRAD_CUDA=OFF")
  endif()
  # Coverage for libFuzzer and ASan + UBSan in every object; UB aborts (a finding) instead of
  # printing and going on.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)

  # The checkpoint reader and UNet3dOptions' JSON without the kernels they do not need (Module's
  # call operator needs Tensor::to, the differentiable cast of ops/cast.cpp).
  add_library(halfgrad_fuzz_nn STATIC ${PROJECT_SOURCE_DIR}/nn/checkpoint.cpp ${PROJECT_SOURCE_DIR}/nn/module.cpp
              ${PROJECT_SOURCE_DIR}/nn/unet3d_options.cpp ${PROJECT_SOURCE_DIR}/ops/cast.cpp)
  target_link_libraries(halfgrad_fuzz_nn PUBLIC halfgrad_autograd nlohmann_json::nlohmann_json)

  foreach(h nifti_fuzz msd_json_fuzz checkpoint_fuzz safetensors_fuzz)
    add_executable(${h} ${CMAKE_CURRENT_LIST_DIR}/${h}.cpp)
    target_include_directories(${h} PRIVATE ${PROJECT_SOURCE_DIR})
    target_link_options(${h} PRIVATE -fsanitize=fuzzer)
  endforeach()
  target_link_libraries(nifti_fuzz PRIVATE halfgrad_io)
  target_link_libraries(msd_json_fuzz PRIVATE halfgrad_io)
  target_link_libraries(checkpoint_fuzz PRIVATE halfgrad_fuzz_nn)
  target_link_libraries(safetensors_fuzz PRIVATE halfgrad_fuzz_nn)
endif()
