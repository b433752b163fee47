#include "train/memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "util/error.h"

namespace gpt {

namespace {

constexpr size_t kUnknown = std::numeric_limits<size_t>::max();

// The number a kernel file starts with; kUnknown if there is none ("max" means no limit).
size_t read_number(const std::string& path) {
    std::ifstream in(path);
    unsigned long long v = 0;
    return in >> v ? static_cast<size_t>(v) : kUnknown;
}

size_t meminfo_available() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    unsigned long long kib = 0;
    while (in >> key >> kib) {
        if (key == "MemAvailable:") return static_cast<size_t>(kib) * 1024;
        in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');  // the unit
    }
    return kUnknown;
}

// Room under the memory limits (cgroup v2) of this process's group and of every group above it:
// a limit anywhere on the way up applies.
size_t cgroup_room() {
    std::ifstream in("/proc/self/cgroup");
    std::string line, group;
    while (std::getline(in, line))
        if (line.rfind("0::", 0) == 0) group = line.substr(3);
    const std::string root = "/sys/fs/cgroup";
    std::string dir = root + (group == "/" ? "" : group);
    size_t room = kUnknown;
    while (dir.size() >= root.size()) {
        const size_t limit = read_number(dir + "/memory.max"), used = read_number(dir + "/memory.current");
        if (limit != kUnknown && used != kUnknown) room = std::min(room, limit > used ? limit - used : 0);
        if (dir == root) break;
        dir.erase(dir.rfind('/'));
    }
    return room;
}

std::string gib(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

}  // namespace

size_t available_host_memory() { return std::min(meminfo_available(), cgroup_room()); }

void require_memory(const MemoryNeed& one, const MemoryNeed& two, int B, const MemoryNeed& available,
                    const std::string& run) {
    // need(b) = fixed + b * per_sequence for each kind of memory, in double: no product of a
    // huge batch can overflow.
    struct Kind {
        const char* name;
        double fixed, per_sequence, available;
    };
    const auto kind = [](const char* name, size_t one, size_t two, size_t available) {
        const double per = double(two) - double(one);
        return Kind{name, double(one) - per, per, double(available)};
    };
    const Kind kinds[] = {kind("device", one.device, two.device, available.device),
                          kind("host", one.host, two.host, available.host)};
    const Kind* short_of = nullptr;
    double largest = B;  // the largest batch that fits in every kind of memory
    for (const Kind& k : kinds) {
        if (!short_of && k.fixed + k.per_sequence * B > k.available) short_of = &k;
        const double room = k.available - k.fixed;
        largest = std::min(largest, k.per_sequence > 0 ? std::floor(room / k.per_sequence) : room < 0 ? 0 : largest);
    }
    if (!short_of) return;
    throw Error(run + " needs about " + gib(short_of->fixed + short_of->per_sequence * B) + " of " + short_of->name +
                " memory (parameters, gradients, AdamW state, activations), but " + gib(short_of->available) +
                " is available; " +
                (largest >= 1 ? "the largest --batch that fits is " + std::to_string(static_cast<long long>(largest))
                              : std::string("not even --batch 1 fits: use a smaller --model or a shorter --seq")));
}

}  // namespace gpt
