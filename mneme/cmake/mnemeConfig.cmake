# Mneme's CMake package: `find_package(mneme)` then `add_mneme(<target>)`.
#
# add_mneme(<target> [LANGUAGES <lang>...]) builds the target's sources through mneme-cc, the
# compiler launcher that also embeds each translation unit's device LLVM bitcode in its object
# (the `.mneme_ir` section), so the target's binary describes its own kernels. Recording needs
# nothing linked in: `mneme record` injects the recorder at run time. LANGUAGES defaults to every
# enabled language among C, CXX, CUDA, HIP, OBJC and OBJCXX.
#
# Find it with -Dmneme_DIR="$(mneme config cmakedir)" (or that folder's parent in CMAKE_PREFIX_PATH).
# MNEME_CC_EXECUTABLE (cached) names the launcher; by default `mneme config launcher` answers.

include_guard(GLOBAL)

include("${CMAKE_CURRENT_LIST_DIR}/mnemeConfigVersion.cmake")
set(mneme_VERSION "${PACKAGE_VERSION}")

if(NOT MNEME_CC_EXECUTABLE)
  # The launcher of the Mneme whose `mneme` is on PATH, else a mneme-cc on PATH.
  find_program(_mneme_cli NAMES mneme)
  if(_mneme_cli)
    execute_process(COMMAND "${_mneme_cli}" config launcher
                    OUTPUT_VARIABLE _mneme_launcher OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE _mneme_status ERROR_QUIET)
    if(_mneme_status EQUAL 0 AND EXISTS "${_mneme_launcher}")
      set(MNEME_CC_EXECUTABLE "${_mneme_launcher}" CACHE FILEPATH "Mneme's compiler launcher (mneme-cc)")
    endif()
  endif()
  if(NOT MNEME_CC_EXECUTABLE)
    find_program(MNEME_CC_EXECUTABLE NAMES mneme-cc DOC "Mneme's compiler launcher (mneme-cc)")
  endif()
endif()

if(NOT MNEME_CC_EXECUTABLE)
  set(mneme_FOUND FALSE)
  set(mneme_NOT_FOUND_MESSAGE
      "neither `mneme config launcher` nor mneme-cc is on PATH: install Mneme (pip install mneme-gpu) in the "
      "environment CMake runs in, or pass -DMNEME_CC_EXECUTABLE=/path/to/mneme-cc")
  return()
endif()

function(add_mneme target)
  cmake_parse_arguments(PARSE_ARGV 1 _mneme "" "" "LANGUAGES")
  if(_mneme_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "add_mneme(${target}): unknown arguments ${_mneme_UNPARSED_ARGUMENTS}; "
                        "use add_mneme(<target> [LANGUAGES <lang>...])")
  endif()
  if(NOT TARGET ${target})
    message(FATAL_ERROR "add_mneme(${target}): no target named ${target}; call add_mneme after "
                        "add_executable/add_library")
  endif()
  set(_langs ${_mneme_LANGUAGES})
  if(NOT _langs)
    get_property(_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
  endif()
  foreach(_lang IN LISTS _langs)
    if(NOT _lang MATCHES "^(C|CXX|CUDA|HIP|OBJC|OBJCXX)$")
      continue()
    endif()
    get_target_property(_previous ${target} ${_lang}_COMPILER_LAUNCHER)
    if(_previous)
      # mneme-cc takes the compiler as its first argument; another launcher (ccache) runs inside it
      message(WARNING "add_mneme(${target}): replacing ${_lang}_COMPILER_LAUNCHER '${_previous}' with mneme-cc")
    endif()
    set_property(TARGET ${target} PROPERTY ${_lang}_COMPILER_LAUNCHER "${MNEME_CC_EXECUTABLE}")
  endforeach()
endfunction()

set(mneme_FOUND TRUE)
