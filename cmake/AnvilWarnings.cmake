# Warnings are errors on Anvil's own targets only (third-party headers are SYSTEM), in the GCC
# builds; the clang fuzzing build (another compiler's warning set) reports them without
# stopping (ANVIL_WERROR=OFF).
option(ANVIL_WERROR "Treat compiler warnings as errors" ON)
function(anvil_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic $<$<BOOL:${ANVIL_WERROR}>:-Werror> -Wno-unused-parameter
      -Wno-sign-compare -Wno-missing-field-initializers>)
endfunction()

# Anvil's locks are annotated (core/util/mutex.h: ABSL_GUARDED_BY and friends); clang's
# thread-safety analysis checks every access to guarded state, as errors, wherever clang builds
# them (CI: the fuzzing build). Every library and program of the engine, the service, its
# workers and the CLI calls this. C++ sources only (nvcc compiles the CUDA kernels). GCC has no
# such analysis.
function(anvil_thread_safety_checks target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wthread-safety -Werror=thread-safety>)
  endif()
endfunction()
