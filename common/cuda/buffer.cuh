// Owning memory: device memory for everything the model holds, and pinned host memory for what
// travels to and from it without the host waiting. Every device allocation goes through here,
// so the trainer can report how much device memory the model holds (MemoryStats).
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <utility>

#include "cuda/check.cuh"

namespace gpt::cuda {

// Bytes of device memory held through DeviceBuffer (the model, the cuBLASLt workspace and padded-copy
// scratch of cuda/gemm.cuh), now and at the peak. Not counted: the CUDA context, kernel code and
// what libraries allocate inside (an instantiated CUDA Graph, say).
struct MemoryStats {
    static std::atomic<size_t>& current() {
        static std::atomic<size_t> bytes{0};
        return bytes;
    }
    static std::atomic<size_t>& peak() {
        static std::atomic<size_t> bytes{0};
        return bytes;
    }
    static void add(size_t n) {
        const size_t now = current() += n;
        size_t p = peak();
        while (now > p && !peak().compare_exchange_weak(p, now)) {}
    }
    static void remove(size_t n) { current() -= n; }
};

// The GPU test programs (workshop builds' included) define GPT_POISON_FRESH_DEVICE_MEMORY: there
// every new allocation reads as NaN, so that a kernel that leaves an output unwritten (an
// exercise's stub, say) cannot pass a test because cudaMalloc happened to return zeros
// (docs/workshop.md). The trainers do not pay for it.
#ifdef GPT_POISON_FRESH_DEVICE_MEMORY
inline constexpr bool kPoisonFreshDeviceMemory = true;
#else
inline constexpr bool kPoisonFreshDeviceMemory = false;
#endif

// Sets every byte to 0xFF, which reads as NaN in fp32 and bf16 and as -1 in integers, and waits
// for it. On a stream of its own, made once, so that it neither waits for nor delays work queued
// on the others.
inline void poison_device_memory(void* p, size_t bytes) {
    static const cudaStream_t stream = [] {
        cudaStream_t s;
        CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        return s;
    }();
    CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

// Where an OwnedArray's memory comes from.
struct DeviceMemory {
    static void* allocate(size_t bytes) {
        void* p = nullptr;
        CUDA_CHECK(cudaMalloc(&p, bytes));
        if constexpr (kPoisonFreshDeviceMemory) {
            try {
                poison_device_memory(p, bytes);
            } catch (...) {
                cudaFree(p);
                throw;
            }
        }
        MemoryStats::add(bytes);
        return p;
    }
    static void release(void* p, size_t bytes) {
        cudaFree(p);  // no check: destructors must not throw
        MemoryStats::remove(bytes);
    }
};
// Page-locked ("pinned") host memory: the only host memory the device copies from and to
// asynchronously. The model stages each batch here.
struct PinnedMemory {
    static void* allocate(size_t bytes) {
        void* p = nullptr;
        CUDA_CHECK(cudaMallocHost(&p, bytes));
        return p;
    }
    static void release(void* p, size_t) { cudaFreeHost(p); }
};

// n elements of T, allocated once, freed when the array goes; movable, not copyable.
template <class T, class Memory>
class OwnedArray {
  public:
    OwnedArray() = default;
    explicit OwnedArray(size_t n) : size_(n) {
        if (n > 0) data_ = static_cast<T*>(Memory::allocate(n * sizeof(T)));
    }
    ~OwnedArray() { release(); }
    OwnedArray(const OwnedArray&) = delete;
    OwnedArray& operator=(const OwnedArray&) = delete;
    OwnedArray(OwnedArray&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    OwnedArray& operator=(OwnedArray&& o) noexcept {
        if (this != &o) {
            release();
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }
    T* data() { return data_; }
    const T* data() const { return data_; }
    size_t size() const { return size_; }

  private:
    void release() {
        if (data_) Memory::release(data_, size_ * sizeof(T));
        data_ = nullptr;
    }
    T* data_ = nullptr;
    size_t size_ = 0;
};

template <class T>
using DeviceBuffer = OwnedArray<T, DeviceMemory>;
template <class T>
using PinnedBuffer = OwnedArray<T, PinnedMemory>;

}  // namespace gpt::cuda
