#include "stream_hold.h"

#include <atomic>

namespace fusetune::cuda {
namespace {

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinUntilReleased(volatile uint32_t* words, uint64_t timeout_ns) {
  const uint64_t start = GlobalTimerNs();
  while (words[0] == 0) {
    if (GlobalTimerNs() - start > timeout_ns) {
      words[1] = 1;
      return;
    }
    __nanosleep(200);
  }
}

}  // namespace

StreamHold::~StreamHold() {
  if (words_ != nullptr) cudaFreeHost(const_cast<uint32_t*>(words_));
}

cudaError_t StreamHold::Hold(cudaStream_t stream, uint64_t timeout_ns) {
  if (words_ == nullptr) {
    void* host = nullptr;
    if (cudaError_t e = cudaHostAlloc(&host, 2 * sizeof(uint32_t), cudaHostAllocMapped); e != cudaSuccess) {
      return e;
    }
    void* device = nullptr;
    if (cudaError_t e = cudaHostGetDevicePointer(&device, host, 0); e != cudaSuccess) {
      cudaFreeHost(host);
      return e;
    }
    words_ = static_cast<volatile uint32_t*>(host);
    device_words_ = static_cast<uint32_t*>(device);
  }
  words_[0] = 0;
  words_[1] = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  SpinUntilReleased<<<1, 1, 0, stream>>>(device_words_, timeout_ns);
  return cudaGetLastError();
}

void StreamHold::Release() {
  if (words_ == nullptr) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  words_[0] = 1;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool StreamHold::TimedOut() const { return words_ != nullptr && words_[1] != 0; }

}  // namespace fusetune::cuda
