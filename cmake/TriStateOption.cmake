# tri_state_option(NAME DOC): a cache variable that is AUTO, ON or OFF.
#   AUTO  use the dependency when it is found, and say so in the configure summary;
#   ON    fail at configure time, naming what is missing;
#   OFF   never look for it.
function(tri_state_option name doc)
  set(${name} AUTO CACHE STRING "${doc} (AUTO|ON|OFF)")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${name}}" value)
  if(value STREQUAL "TRUE" OR value STREQUAL "YES" OR value STREQUAL "1")
    set(value ON)
  elseif(value STREQUAL "FALSE" OR value STREQUAL "NO" OR value STREQUAL "0")
    set(value OFF)
  endif()
  if(NOT value MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${name} must be AUTO, ON or OFF, not '${${name}}'")
  endif()
  set(${name} ${value} PARENT_SCOPE)
endfunction()

# resolve_tri_state(NAME FOUND WHAT): turn the option into a final ON/OFF in
# NAME_ENABLED, failing clearly when ON was asked for and FOUND is false.
function(resolve_tri_state name found what)
  if(${name} STREQUAL "OFF")
    set(${name}_ENABLED OFF PARENT_SCOPE)
  elseif(found)
    set(${name}_ENABLED ON PARENT_SCOPE)
  elseif(${name} STREQUAL "ON")
    message(FATAL_ERROR "${name}=ON but ${what} was not found. Install it (scripts/setup.sh) "
                        "or configure with -D${name}=AUTO or OFF.")
  else()
    set(${name}_ENABLED OFF PARENT_SCOPE)
  endif()
endfunction()
