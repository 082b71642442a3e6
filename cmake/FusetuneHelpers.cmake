# fusetune_test(NAME <name> SOURCES <files...> LIBS <targets...> [INCLUDE_DIRS <dirs...>]
#               [LABELS <labels...>] [TIMEOUT s])
# A GoogleTest binary registered with ctest. GPU tests use LABELS gpu and exit 77 to skip
# (SKIP_RETURN_CODE), which ctest shows as Skipped, never as passed. Everything about the test
# target goes through these arguments: with FUSETUNE_BUILD_TESTS=OFF the target does not exist,
# so code outside an if(FUSETUNE_BUILD_TESTS) block must not name it.
function(fusetune_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;INCLUDE_DIRS;LABELS" ${ARGN})
  if(NOT FUSETUNE_BUILD_TESTS)
    return()
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  if(T_INCLUDE_DIRS)
    target_include_directories(${T_NAME} PRIVATE ${T_INCLUDE_DIRS})
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77)
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()

function(fusetune_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  endif()
endfunction()
