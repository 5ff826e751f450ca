# Warnings are errors on Anvil's own targets only (third-party headers are SYSTEM).
function(anvil_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Werror -Wno-unused-parameter
      -Wno-sign-compare -Wno-missing-field-initializers>)
endfunction()
