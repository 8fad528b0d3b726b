// The GPU kernels' source (src/kernels/attention_gpu.cu) compiled for the CPU emulator
// (gpu_emulator.hpp): the very text NVRTC and hipRTC compile, its entry points exported by name.
#define SDPA_GPU_EMULATION 1
#include "kernels/attention_gpu.cu"
