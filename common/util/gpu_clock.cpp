#include "util/gpu_clock.h"

#include <dlfcn.h>

#include <cstdio>

namespace gpt {

namespace {

// The few NVML entry points used, declared here rather than through nvml.h (which the CUDA
// toolkit does not always ship): NVML's C interface is stable, and each function returns 0
// (NVML_SUCCESS) on success.
using NvmlDevice = void*;
using InitFn = int (*)();
using ShutdownFn = int (*)();
using HandleByBusIdFn = int (*)(const char*, NvmlDevice*);
using ClockInfoFn = int (*)(NvmlDevice, int, unsigned*);
using ReasonsFn = int (*)(NvmlDevice, unsigned long long*);
using PowerFn = int (*)(NvmlDevice, unsigned*);
using TemperatureFn = int (*)(NvmlDevice, int, unsigned*);
constexpr int kClockSm = 1;         // NVML_CLOCK_SM
constexpr int kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU

template <class Fn>
Fn symbol(void* library, const char* name) {
    return reinterpret_cast<Fn>(dlsym(library, name));
}

struct ReasonName {
    uint64_t bit;
    const char* name;
};
constexpr ReasonName kReasonNames[] = {
    {0x1, "idle"},       {0x2, "applications clocks"}, {0x4, "power cap"},   {0x8, "hw slowdown"},
    {0x10, "sync boost"}, {0x20, "sw thermal"},         {0x40, "hw thermal"}, {0x80, "power brake"},
    {0x100, "display clocks"},
};

}  // namespace

std::string clock_reason_names(uint64_t reasons) {
    std::string names;
    uint64_t known = 0;
    for (const ReasonName& r : kReasonNames) {
        known |= r.bit;
        if (reasons & r.bit) names += (names.empty() ? "" : "+") + std::string(r.name);
    }
    if (reasons & ~known) {
        char hex[32];
        std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(reasons & ~known));
        names += (names.empty() ? "" : "+") + std::string(hex);
    }
    return names.empty() ? "none" : names;
}

GpuClockReader::GpuClockReader(const std::string& pci_bus_id) {
    library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library_) {
        why_ = "NVML (libnvidia-ml.so.1, part of the NVIDIA driver) not found";
        return;
    }
    const auto init = symbol<InitFn>(library_, "nvmlInit_v2");
    const auto by_bus_id = symbol<HandleByBusIdFn>(library_, "nvmlDeviceGetHandleByPciBusId_v2");
    if (!init || !by_bus_id || init() != 0) {
        why_ = "NVML did not start";
        dlclose(library_);
        library_ = nullptr;
        return;
    }
    NvmlDevice device = nullptr;
    if (by_bus_id(pci_bus_id.c_str(), &device) != 0 || !device) {
        why_ = "NVML does not know the GPU at PCI bus id " + pci_bus_id;
        return;  // the destructor shuts NVML down
    }
    device_ = device;
}

GpuClockReader::~GpuClockReader() {
    if (!library_) return;
    if (const auto shutdown = symbol<ShutdownFn>(library_, "nvmlShutdown")) shutdown();
    dlclose(library_);
}

GpuClock GpuClockReader::read() const {
    GpuClock c;
    if (!device_) return c;
    const auto clock = symbol<ClockInfoFn>(library_, "nvmlDeviceGetClockInfo");
    if (!clock || clock(device_, kClockSm, &c.sm_mhz) != 0) return GpuClock{};
    c.read = true;
    // Drivers from 535 on name it "clocks event reasons"; older ones only "throttle reasons".
    auto reasons = symbol<ReasonsFn>(library_, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!reasons) reasons = symbol<ReasonsFn>(library_, "nvmlDeviceGetCurrentClocksThrottleReasons");
    unsigned long long mask = 0;
    if (reasons && reasons(device_, &mask) == 0) c.reasons = mask;
    if (const auto power = symbol<PowerFn>(library_, "nvmlDeviceGetPowerUsage")) {
        if (power(device_, &c.power_mw) != 0) c.power_mw = 0;
    }
    if (const auto temperature = symbol<TemperatureFn>(library_, "nvmlDeviceGetTemperature")) {
        if (temperature(device_, kTemperatureGpu, &c.temperature_c) != 0) c.temperature_c = 0;
    }
    return c;
}

}  // namespace gpt
