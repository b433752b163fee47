#include "util/file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;

namespace gpt {

namespace {

std::string prefix(const std::string& what, const std::string& path) {
    return what.empty() ? path : what + " " + path;
}

const char* kind(fs::file_type type) {
    switch (type) {
        case fs::file_type::regular: return "a regular file";
        case fs::file_type::directory: return "a directory";
        case fs::file_type::fifo: return "a FIFO (named pipe)";
        case fs::file_type::character: return "a character device";
        case fs::file_type::block: return "a block device";
        case fs::file_type::socket: return "a socket";
        default: return "neither a file nor a directory";
    }
}

// The type of PATH after symbolic links (not_found if there is nothing); throws only when it
// cannot be looked at (a folder on the way without permission).
fs::file_type type_of(const std::string& path, const std::string& what) {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (ec && status.type() != fs::file_type::not_found)
        throw Error(prefix(what, path) + ": cannot access it (" + ec.message() + ")");
    return status.type();
}

}  // namespace

void require_regular_file(const std::string& path, const std::string& what) {
    const fs::file_type type = type_of(path, what);
    if (type == fs::file_type::not_found) throw MissingFile(prefix(what, path) + ": not found");
    if (type != fs::file_type::regular)
        throw Error(prefix(what, path) + ": is " + kind(type) + ", not a regular file");
}

std::ifstream open_regular_file(const std::string& path, const std::string& what) {
    require_regular_file(path, what);
    // Between the check and the open someone could put a FIFO there; we accept that race: the
    // point is a clear message for a wrong path, not a defence against an attacker.
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(prefix(what, path) + ": cannot open (" + std::strerror(errno) + ")");
    return in;
}

std::string read_regular_file(const std::string& path, const std::string& what, size_t max_bytes) {
    std::ifstream in = open_regular_file(path, what);
    std::string text;
    char chunk[1 << 16];
    // Read in chunks and stop past the limit, rather than trust the size stat() reported: the
    // file may grow while we read it.
    while (in.read(chunk, sizeof(chunk)) || in.gcount() > 0) {
        text.append(chunk, static_cast<size_t>(in.gcount()));
        if (text.size() > max_bytes)
            throw Error(prefix(what, path) + ": larger than " + std::to_string(max_bytes) +
                        " bytes, too large to be this kind of file");
    }
    if (in.bad()) throw Error(prefix(what, path) + ": read error");
    return text;
}

void require_directory(const std::string& path, const std::string& what) {
    const fs::file_type type = type_of(path, what);
    if (type == fs::file_type::not_found) throw MissingFile(prefix(what, path) + " does not exist");
    if (type != fs::file_type::directory)
        throw Error(prefix(what, path) + " is " + kind(type) + ", not a directory");
}

void require_writable_path(const std::string& path, const std::string& what) {
    if (path.empty()) throw Error(what + ": the path is empty");
    const fs::file_type type = type_of(path, what);
    if (type != fs::file_type::not_found && type != fs::file_type::regular)
        throw Error(prefix(what, path) + ": is " + kind(type) + ", cannot write a file there");
    const fs::path parent = fs::path(path).parent_path();
    const std::string dir = parent.empty() ? "." : parent.string();
    const fs::file_type dir_type = type_of(dir, what);
    if (dir_type == fs::file_type::not_found) {
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) throw Error(prefix(what, path) + ": cannot create its directory " + dir + " (" + ec.message() + ")");
    } else if (dir_type != fs::file_type::directory) {
        throw Error(prefix(what, path) + ": " + dir + " is " + kind(dir_type) + ", not a directory");
    }
    if (access(dir.c_str(), W_OK) != 0) throw Error(prefix(what, path) + ": directory " + dir + " is not writable");
}

}  // namespace gpt
