#include "util/cli.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "util/error.h"

namespace gpt::cli {

namespace {

// "--steps" followed by "--lr 1" has lost its value; a value that really starts with "--" can
// still be given as "--opt=--value".
bool looks_like_option(const std::string& arg) { return arg.size() > 2 && arg.compare(0, 2, "--") == 0; }

std::string number_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return buf;
}

// Appends `text` to `out`, broken into lines of at most `width` characters, every line after
// the first indented by `indent` spaces (the first continues what is already on the line).
void wrap(std::string& out, const std::string& text, size_t indent, size_t width) {
    size_t column = indent;
    std::istringstream words(text);
    std::string word;
    bool first = true;
    while (words >> word) {
        if (!first && column + 1 + word.size() > width) {
            out += "\n" + std::string(indent, ' ');
            column = indent;
        } else if (!first) {
            out += ' ';
            ++column;
        }
        out += word;
        column += word.size();
        first = false;
    }
}

}  // namespace

Parsed parse(int argc, char** argv, const std::vector<Option>& options, bool takes_operands) {
    Parsed parsed;
    std::vector<bool> given(options.size(), false);
    bool only_operands = false;  // after "--", everything is an operand
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (only_operands || arg.empty() || arg[0] != '-' || arg == "-") {
            if (!takes_operands)
                throw Error("unexpected argument '" + arg + "': this tool takes only options (see --help)");
            parsed.operands.push_back(arg);
            continue;
        }
        if (arg == "--") {
            only_operands = true;
            continue;
        }
        if (arg == "--help" || arg == "-h") {
            parsed.help = true;
            return parsed;
        }
        std::string value;
        bool has_value = false;
        if (const size_t eq = arg.find('='); looks_like_option(arg) && eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
            has_value = true;
        }
        size_t found = options.size();
        for (size_t k = 0; k < options.size(); ++k)
            if (arg == options[k].name) found = k;
        if (arg == "--help") throw Error("option --help takes no value");
        if (found == options.size()) throw Error("unknown option '" + arg + "' (see --help)");
        const Option& option = options[found];
        if (option.flag) {
            if (has_value) throw Error("option " + arg + " takes no value");
            option.set("yes");
            given[found] = true;
            continue;
        }
        if (!has_value) {
            if (i + 1 >= argc || looks_like_option(argv[i + 1]))
                throw Error("option " + arg + " needs a value (" + option.metavar + ")");
            value = argv[++i];
        }
        if (value.empty()) throw Error("option " + arg + ": the value is empty (expected " + option.metavar + ")");
        option.set(value);
        given[found] = true;
    }
    for (size_t k = 0; k < options.size(); ++k)
        if (options[k].required && !given[k])
            throw Error("option " + options[k].name + " " + options[k].metavar + " is required (see --help)");
    return parsed;
}

std::string describe(const std::vector<Option>& options) {
    constexpr size_t kColumn = 26, kWidth = 100;
    std::string out;
    for (const Option& option : options) {
        std::string left = "  " + option.name + (option.flag ? "" : " " + option.metavar);
        if (left.size() < kColumn) left.resize(kColumn, ' ');
        else left += "\n" + std::string(kColumn, ' ');
        out += left;
        std::string help = option.help;
        if (option.required) help += " [required]";
        else if (option.show) help += " [" + option.show() + "]";
        wrap(out, help, kColumn, kWidth);
        out += "\n";
    }
    out += std::string("  --help") + std::string(kColumn - 8, ' ') + "this text\n";
    return out;
}

uint64_t whole_number(const std::string& option, const std::string& value, uint64_t min, uint64_t max) {
    const bool negative = !value.empty() && value[0] == '-';
    const std::string digits = negative ? value.substr(1) : value;
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
        throw Error("option " + option + ": '" + value + "' is not a whole number");
    // Read the digits ourselves: strtoull would take "-1" as 2^64 - 1.
    uint64_t v = 0;
    bool overflow = false;
    for (const char c : digits) {
        const uint64_t digit = static_cast<uint64_t>(c - '0');
        if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) overflow = true;
        else v = v * 10 + digit;
    }
    if ((negative && (v != 0 || overflow)) || (!negative && !overflow && v < min))
        throw Error("option " + option + ": " + value + " is too small (at least " + std::to_string(min) + ")");
    if (overflow || v > max)
        throw Error("option " + option + ": " + value + " is too large (at most " + std::to_string(max) + ")");
    return negative ? 0 : v;
}

double real_number(const std::string& option, const std::string& value, Bound low, Bound high,
                   bool single_precision) {
    const std::string where = "option " + option + ": ";
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(value.c_str(), &end);
    const bool overflowed = errno == ERANGE && std::isinf(v);  // "1e999": a number, too large
    if (value.empty() || std::isspace(static_cast<unsigned char>(value[0])) || *end != '\0')
        throw Error(where + "'" + value + "' is not a number");
    if (std::isnan(v)) throw Error(where + "'" + value + "' is not a number");
    if (std::isinf(v) && !overflowed) throw Error(where + "'" + value + "' is not a finite number");

    auto check = [&](double x, const std::string& note) {
        if (x < low.value || (low.strict && x == low.value))
            throw Error(where + value + note + " is too small (" + (low.strict ? "must be above " : "at least ") +
                        number_text(low.value) + ")");
        if (x > high.value || (high.strict && x == high.value))
            throw Error(where + value + note + " is too large (" + (high.strict ? "must be below " : "at most ") +
                        number_text(high.value) + ")");
    };
    check(v, "");
    // A float field holds the value rounded to single precision, which can leave the range:
    // 0.99999999999 becomes 1, 1e-50 becomes 0. Say so, or the message would make no sense.
    if (single_precision) {
        constexpr double kFloatMax = std::numeric_limits<float>::max();
        if (std::fabs(v) > kFloatMax)  // a range wider than a float's
            throw Error(where + value + " does not fit in a float (magnitude at most " + number_text(kFloatMax) + ")");
        const double as_float = static_cast<float>(v);
        if (as_float != v) check(as_float, " (" + number_text(as_float) + " in single precision)");
        v = as_float;
    }
    return v;
}

Option text(const std::string& name, const std::string& metavar, const std::string& help, std::string& field,
            std::function<void(const std::string&)> check) {
    return {name, metavar, help,
            [&field, check](const std::string& v) {
                if (check) check(v);
                field = v;
            },
            [&field] { return field.empty() ? std::string("none") : field; }};
}

}  // namespace gpt::cli
