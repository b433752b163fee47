# GoogleTest: the installed package if there is one, else FetchContent. Without internet, point
# FETCHCONTENT_SOURCE_DIR_GOOGLETEST at a copy of the sources (Debian: /usr/src/googletest,
# used automatically when it exists).
find_package(GTest CONFIG QUIET)
if(NOT GTest_FOUND)
  include(FetchContent)
  if(NOT DEFINED FETCHCONTENT_SOURCE_DIR_GOOGLETEST AND EXISTS /usr/src/googletest/CMakeLists.txt)
    set(FETCHCONTENT_SOURCE_DIR_GOOGLETEST /usr/src/googletest)
  endif()
  FetchContent_Declare(googletest
    URL https://github.com/google/googletest/archive/refs/tags/v1.14.0.tar.gz)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  FetchContent_MakeAvailable(googletest)
  if(NOT TARGET GTest::gtest_main)
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
  message(STATUS "GoogleTest: built from ${googletest_SOURCE_DIR}")
else()
  message(STATUS "GoogleTest: installed package ${GTest_DIR}")
endif()
include(GoogleTest)
