// What every GPU test needs: a fixture that skips (or, with REQUIRE_GPU=1, fails) when there is
// no usable GPU (for a stage's tests, one the stage runs on), device arrays that upload,
// download and poison, and a checked synchronisation.
//
// Skipping happens in the fixture's SetUp() and nowhere else, so CTest reports a machine
// without a GPU as "skipped", never as "passed".
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/buffer.cuh"
#include "cuda/check.cuh"
#include "cuda/device.cuh"
#include "cuda/types.cuh"
#include "testing/compare.h"
#include "train/policy.h"
#include "util/compute_capability.h"
#include "util/error.h"

namespace gpt::test {

// REQUIRE_GPU=1: a GPU machine's test run, where a missing GPU is an error, not a reason to skip.
inline bool gpu_required() {
    const char* v = std::getenv("REQUIRE_GPU");
    return v && std::string(v) == "1";
}

// Why GPU tests that need `need` cannot run here, or "" when they can.
inline std::string why_no_usable_gpu(const GpuNeed& need) {
    if (cuda::device_count() == 0) return "no CUDA device found";
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        cudaGetLastError();  // clear it: later tests must not see a stale error
        return "cannot read the properties of CUDA device 0";
    }
    return gpu_test_skip_reason(p.name, p.major, p.minor, need);
}

// The fixture of every GPU test: it skips (or with REQUIRE_GPU=1 fails) in SetUp() when GPU 0
// cannot run what needs() says, by default bf16 tensor cores (Ampere or newer).
class GpuTest : public ::testing::Test {
  protected:
    void SetUp() override {
        const std::string why = why_no_usable_gpu(needs());
        if (why.empty()) return;
        if (gpu_required()) GTEST_FAIL() << "REQUIRE_GPU=1 but " << why << ": this GPU test cannot run";
        GTEST_SKIP() << why << ": GPU test skipped (set REQUIRE_GPU=1 to make this a failure)";
    }
    virtual GpuNeed needs() const { return {"these tests", 80, "bf16 tensor cores"}; }
};

// The tests of one stage need what the stage needs: stage 00's run on a T4, stage 01's do not.
template <class Stage>
class StageGpuTest : public GpuTest {
  protected:
    GpuNeed needs() const override { return stage_gpu_need<Stage>(); }
};

// Waits for all work on the device, on every stream, and checks the wait and the last launch
// error. A kernel that faulted or was launched with a bad configuration is reported here, named
// by `what`; it throws, which ends the test as a failure (nothing after a fault can be trusted).
inline void sync_and_check(const std::string& what) {
    const cudaError_t sync = cudaDeviceSynchronize();
    const cudaError_t launch = cudaGetLastError();
    for (const cudaError_t err : {sync, launch})
        if (err != cudaSuccess)
            throw Error(what + ": CUDA error " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

// --- element conversions between the host's float and a device element type -----------------

template <class T>
inline constexpr bool is_act_type = std::is_same_v<T, float> || std::is_same_v<T, bf16>;

template <class T, class U>
T to_element(U x) {
    if constexpr (std::is_same_v<T, bf16>) return from_float<bf16>(static_cast<float>(x));  // round to nearest
    else return static_cast<T>(x);
}

template <class T>
float element_to_float(T x) {
    if constexpr (std::is_same_v<T, bf16>) return __bfloat162float(x);
    else return static_cast<float>(x);
}

// The poison of an output element: is_poison() recognises its float image after download.
template <class T>
T poison_element() {
    static_assert(is_act_type<T>, "poison is defined for float and bf16 elements");
    if constexpr (std::is_same_v<T, bf16>) {
        __nv_bfloat16_raw raw;
        raw.x = kPoisonBf16Bits;
        return bf16(raw);
    } else {
        return poison_value();
    }
}

// `v` rounded to the element type Act and back: the values a kernel on Act data really sees.
// The CPU reference runs on these, so that a comparison measures only the kernel's own error.
template <class Act>
std::vector<float> rounded(const std::vector<float>& v) {
    if constexpr (std::is_same_v<Act, float>) {
        return v;
    } else {
        std::vector<float> out(v.size());
        for (size_t i = 0; i < v.size(); ++i) out[i] = element_to_float(to_element<Act>(v[i]));
        return out;
    }
}

// --- device arrays -----------------------------------------------------------------------------

// n elements of T in device memory. Every transfer is followed by a device-wide synchronisation:
// the ops run on their own non-blocking stream, which does not wait for copies on the default
// stream (nor they for it), so this is what makes "upload, launch, download" safe.
template <class T>
class DeviceArray {
  public:
    // n elements, poisoned (float, bf16) or filled with 0xFF bytes (other types): an output
    // that is read back without having been written shows it.
    explicit DeviceArray(size_t n) : buffer_(n) {
        if constexpr (is_act_type<T>) poison();
        else fill_bytes(0xFF);
    }
    // A copy of `host`, each element converted (rounded) to T.
    template <class U>
    explicit DeviceArray(const std::vector<U>& host) : buffer_(host.size()) {
        upload(host);
    }

    template <class U>
    void upload(const std::vector<U>& host) {
        if (host.size() != size())
            throw Error("DeviceArray::upload: " + std::to_string(host.size()) + " values for " +
                        std::to_string(size()) + " elements");
        std::vector<T> staged(host.size());
        for (size_t i = 0; i < host.size(); ++i) staged[i] = to_element<T>(host[i]);
        copy_in(staged);
    }

    // The elements as floats (bf16 converts exactly; poison stays recognisable).
    std::vector<float> download() const {
        const std::vector<T> raw = download_raw();
        std::vector<float> out(raw.size());
        for (size_t i = 0; i < raw.size(); ++i) out[i] = element_to_float(raw[i]);
        return out;
    }
    std::vector<T> download_raw() const {
        std::vector<T> host(size());
        if (size() == 0) return host;
        CUDA_CHECK(cudaDeviceSynchronize());  // whatever wrote this array, on any stream, is done
        CUDA_CHECK(cudaMemcpy(host.data(), buffer_.data(), size() * sizeof(T), cudaMemcpyDeviceToHost));
        return host;
    }

    // Fill with the poison pattern before a launch that must write every element.
    void poison() { copy_in(std::vector<T>(size(), poison_element<T>())); }
    // Fill every byte: 0xFF makes float and bf16 elements NaN (scratch memory the op may not read).
    void fill_bytes(unsigned char byte) {
        if (size() == 0) return;
        CUDA_CHECK(cudaMemset(buffer_.data(), byte, size() * sizeof(T)));
        CUDA_CHECK(cudaDeviceSynchronize());
    }

    T* data() { return buffer_.data(); }
    const T* data() const { return buffer_.data(); }
    size_t size() const { return buffer_.size(); }

  private:
    void copy_in(const std::vector<T>& host) {
        if (host.empty()) return;
        CUDA_CHECK(cudaMemcpy(buffer_.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
        // From pageable memory cudaMemcpy may return before the data has reached the device.
        CUDA_CHECK(cudaDeviceSynchronize());
    }

    cuda::DeviceBuffer<T> buffer_;
};

// Untyped memory an op asks for in bytes (saved activations, scratch), as the model graph
// allocates it: whole floats, at least one. Filled with NaN bytes, so that an op reading
// memory it did not write first spreads NaN into its outputs.
class DeviceScratch {
  public:
    explicit DeviceScratch(size_t bytes) : words_(std::max<size_t>(1, (bytes + sizeof(float) - 1) / sizeof(float))) {
        fill_with_nan();
    }
    void fill_with_nan() { words_.fill_bytes(0xFF); }
    void* data() { return words_.data(); }

  private:
    DeviceArray<float> words_;
};

}  // namespace gpt::test
