# The anvil_thread_safety_violation test (tests/CMakeLists.txt): clang must refuse
# thread_safety_violation.cc for reading a guarded member without its lock, and accept it with
# the lock taken (ANVIL_THREAD_SAFETY_CONTROL).
#   cmake -DCLANGXX=<clang++ or ""> -DSOURCE_DIR=<repository root> [-DINCLUDE_DIRS=<dirs>] -P this
# Without a clang++ it prints "no clang++ found" (the test's SKIP_REGULAR_EXPRESSION).
if(NOT CLANGXX)
  message("anvil_thread_safety_violation: no clang++ found (clang++-14 or clang++); skipped")
  return()
endif()
set(source "${SOURCE_DIR}/tests/util/thread_safety_violation.cc")
set(flags -fsyntax-only -std=c++20 -Wthread-safety -Werror=thread-safety "-I${SOURCE_DIR}")
foreach(dir IN LISTS INCLUDE_DIRS)
  list(APPEND flags -isystem "${dir}")
endforeach()

execute_process(COMMAND "${CLANGXX}" ${flags} "${source}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "${CLANGXX} compiled ${source}, which reads a guarded member without its lock: the "
                      "thread-safety analysis checks nothing (core/util/mutex.h's annotations or the flags)\n${out}")
endif()
if(NOT out MATCHES "requires holding mutex")
  message(FATAL_ERROR "${CLANGXX} refused ${source}, but not for the unguarded read "
                      "(expected \"requires holding mutex\"):\n${out}")
endif()
message("the unguarded read is refused, as it should be:\n${out}")

execute_process(COMMAND "${CLANGXX}" ${flags} -DANVIL_THREAD_SAFETY_CONTROL "${source}" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${CLANGXX} refused the control (the same read with the lock held):\n${out}")
endif()
message("the control (the read with the lock held) compiles")
