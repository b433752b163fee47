// Command-line options, parsed the same way by every tool (the trainers, gpt_prepare, gpt_init).
//
// A tool describes its options in a table: each entry has a name, what its value is, one line
// of help, and a setter that checks the value against its real domain and stores it. parse()
// reads "--opt value" and "--opt=value"; describe() writes the option list of --help. Every
// mistake is a gpt::Error of one line that names the option and the reason:
//
//   option --batch: 99999999999 is too large (at most 2147483647)
//   option --beta1: 1 is too large (must be below 1)
//   option --seed: 'abc' is not a whole number
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "util/error.h"

namespace gpt::cli {

struct Option {
    std::string name;     // "--batch"
    std::string metavar;  // what the value is ("B", "PATH"): in --help and in "needs a value"
    std::string help;     // one sentence for --help
    std::function<void(const std::string&)> set;  // checks the value, then stores it; throws gpt::Error
    std::function<std::string()> show;            // the value now, shown as the default in --help
    bool required = false;                        // parse() fails when it is not given
    bool flag = false;                            // takes no value: set("yes") when given
};

struct Parsed {
    bool help = false;                  // --help (or -h) was given: print the usage, do nothing else
    std::vector<std::string> operands;  // the arguments that are not options (gpt_prepare's files)
};

// Parses argv[1..] with the table's setters, in order (a repeated option: the last one wins).
// An argument that does not start with "-" (or is "-", or comes after "--") is an operand, an
// error unless `takes_operands`.
Parsed parse(int argc, char** argv, const std::vector<Option>& options, bool takes_operands);

// The option lines of --help, "  --name VALUE   help [default]", then --help itself.
std::string describe(const std::vector<Option>& options);

// ---- values ----------------------------------------------------------------------------------

// A whole number in [min, max], written in decimal digits ("-1" is a whole number too small for
// a minimum of 0, not "not a number").
uint64_t whole_number(const std::string& option, const std::string& value, uint64_t min, uint64_t max);

// A limit of a real number's range: inclusive (at_least, at_most) or strict (above, below).
struct Bound {
    double value;
    bool strict;
};
inline Bound at_least(double v) { return {v, false}; }
inline Bound above(double v) { return {v, true}; }
inline Bound at_most(double v) { return {v, false}; }
inline Bound below(double v) { return {v, true}; }

// A finite real number within [low, high] (strict bounds exclude their value). With
// `single_precision` the range is checked on the float the program will use: 1e-50 is 0 as a
// float, so it is not above 0.
double real_number(const std::string& option, const std::string& value, Bound low, Bound high,
                   bool single_precision);

// ---- table entries ---------------------------------------------------------------------------

// An option that sets an integer field to a whole number in [min, max].
template <class T>
Option whole(const std::string& name, const std::string& metavar, const std::string& help, T& field, uint64_t min,
             uint64_t max = std::numeric_limits<T>::max()) {
    static_assert(std::is_integral_v<T>, "whole() sets an integer");
    return {name, metavar, help,
            [&field, name, min, max](const std::string& v) { field = static_cast<T>(whole_number(name, v, min, max)); },
            [&field] { return std::to_string(field); }};
}

// An option that sets a float or double field to a finite number within [low, high] (by
// default, up to the largest finite value of the field's type).
template <class T>
Option real(const std::string& name, const std::string& metavar, const std::string& help, T& field, Bound low,
            Bound high = at_most(std::numeric_limits<T>::max())) {
    static_assert(std::is_floating_point_v<T>, "real() sets a float or double");
    constexpr bool single = sizeof(T) == sizeof(float);
    return {name, metavar, help,
            [&field, name, low, high](const std::string& v) {
                field = static_cast<T>(real_number(name, v, low, high, single));
            },
            [&field] {
                std::ostringstream s;
                s << field;
                return s.str();
            }};
}

// An option without a value ("--profile"): sets the field to true when given.
inline Option flag(const std::string& name, const std::string& help, bool& field) {
    Option o{name, "", help, [&field](const std::string&) { field = true; }, nullptr};
    o.flag = true;
    return o;
}

// An option that sets a text field (a path, a name); `check`, if given, rejects a bad value by
// throwing gpt::Error. An empty field shows as "none" in --help.
Option text(const std::string& name, const std::string& metavar, const std::string& help, std::string& field,
            std::function<void(const std::string&)> check = nullptr);

// A check for text(): the value is `a` or `b` ("option --dtype: 'fp16' is neither fp32 nor bf16").
inline std::function<void(const std::string&)> either(const std::string& name, const std::string& a,
                                                      const std::string& b) {
    return [=](const std::string& v) {
        if (v != a && v != b) throw Error("option " + name + ": '" + v + "' is neither " + a + " nor " + b);
    };
}

// The same option, but one that must be given.
inline Option required(Option option) {
    option.required = true;
    return option;
}

}  // namespace gpt::cli
