# Warnings as an INTERFACE target: linked by our own targets only, never forced on users of
# the headers of our dependencies. -Werror only when SDPA_DOCTOR_WERROR is ON (CI).
add_library(sdpa_doctor_warnings INTERFACE)
target_compile_options(sdpa_doctor_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wformat=2
    -Wimplicit-fallthrough>)
if(SDPA_DOCTOR_WERROR)
  target_compile_options(sdpa_doctor_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
