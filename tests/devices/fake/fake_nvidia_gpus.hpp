// The stand-in NVIDIA GPUs both fake libraries answer for: one per "sm_XY" in FAKE_NVIDIA_GPUS
// ("sm_90,sm_86"; unset: one sm_90; empty: none), as the number XY.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

inline std::vector<int> fake_nvidia_gpus() {
  const char* env = std::getenv("FAKE_NVIDIA_GPUS");
  const std::string list = env ? env : "sm_90";
  std::vector<int> out;
  for (size_t at = 0; (at = list.find("sm_", at)) != std::string::npos; at += 3)
    out.push_back(std::atoi(list.c_str() + at + 3));
  return out;
}
