# Warnings as an INTERFACE target: linked by our own targets only, never forced on users of
# the headers of our dependencies. -Werror only when SDPA_DOCTOR_WERROR is ON (CI).
add_library(sdpa_doctor_warnings INTERFACE)
target_compile_options(sdpa_doctor_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wformat=2
    -Wimplicit-fallthrough>
  # GCC 12 reports false -Wrestrict positives inside libstdc++ std::string (GCC bug 105329).
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>)
if(SDPA_DOCTOR_WERROR)
  target_compile_options(sdpa_doctor_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
