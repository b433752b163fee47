// The SM clock a GPU runs at now, and why the driver holds it below its maximum (power cap,
// thermal slowdown, ...): what a benchmark records beside each time, so that two figures
// measured at different clocks are seen as such. On an H200 the same kernel timed 0.14 or 0.19 ms
// depending on what ran before it, and the same GEMM ceiling 687 or 831 TFLOP/s.
//
// The readings come from NVML (libnvidia-ml.so.1, installed with the NVIDIA driver), loaded when
// first needed: nothing links against it, so a machine without the driver builds and runs
// everything else, and a reader there says why it has no readings. It only reads: no clock or
// setting is changed.
#pragma once
#include <cstdint>
#include <string>

namespace gpt {

// One reading. `read` false: no reading (no NVML, or it failed for this GPU); the rest is then 0.
struct GpuClock {
    bool read = false;
    unsigned sm_mhz = 0;
    uint64_t reasons = 0;  // NVML's clock event ("throttle") reasons, a bit mask: clock_reason_names()
    unsigned power_mw = 0;         // 0: not reported
    unsigned temperature_c = 0;    // 0: not reported
};

// The reasons as words, "+"-joined: "none", "power cap", "idle+sw thermal"; an unknown bit as its
// hex value. The bits are NVML's (nvmlClocksEventReason*), the same nvidia-smi prints as a mask.
std::string clock_reason_names(uint64_t reasons);

// Readings of one GPU, named by its PCI bus id as cudaDeviceGetPCIBusId writes it
// ("0000:1B:00.0"), the one name NVML and CUDA share (their device numbers can differ).
class GpuClockReader {
  public:
    explicit GpuClockReader(const std::string& pci_bus_id);
    ~GpuClockReader();
    GpuClockReader(const GpuClockReader&) = delete;
    GpuClockReader& operator=(const GpuClockReader&) = delete;

    bool available() const { return device_ != nullptr; }
    const std::string& why_unavailable() const { return why_; }  // empty when available
    GpuClock read() const;                                       // now; read false if unavailable

  private:
    void* library_ = nullptr;  // dlopen's handle
    void* device_ = nullptr;   // nvmlDevice_t
    std::string why_;
};

}  // namespace gpt
