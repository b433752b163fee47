// Owning device memory. Every allocation goes through here, so the trainer can report how
// much device memory the model holds (peak_allocated_bytes).
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <utility>

#include "cuda/check.cuh"

namespace gpt::cuda {

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

template <class T>
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t n) : size_(n) {
        if (n == 0) return;
        CUDA_CHECK(cudaMalloc(&data_, n * sizeof(T)));
        MemoryStats::add(n * sizeof(T));
    }
    ~DeviceBuffer() { release(); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
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
        if (!data_) return;
        cudaFree(data_);  // no check: destructors must not throw
        MemoryStats::remove(size_ * sizeof(T));
        data_ = nullptr;
    }
    T* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace gpt::cuda
