# SDPA_DOCTOR_SANITIZE: a ';'-separated list such as "address;undefined" (the asan preset).
set(SDPA_DOCTOR_SANITIZE "" CACHE STRING "Sanitizers to build with (address;undefined)")
if(SDPA_DOCTOR_SANITIZE)
  string(REPLACE ";" "," _sanitizers "${SDPA_DOCTOR_SANITIZE}")
  add_compile_options(-fsanitize=${_sanitizers} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_sanitizers})
endif()
