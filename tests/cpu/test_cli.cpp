// Tests of the command-line parser every tool shares (common/util/cli.h): each value is checked
// against its real domain, and every mistake is one line that names the option and the reason.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "testing/compare.h"
#include "train/options.h"
#include "util/cli.h"
#include "util/error.h"

namespace gpt {
namespace {

using test::error_of;

// argv for parse(): the strings stay alive as long as the Args.
struct Args {
    std::vector<std::string> strings;
    std::vector<char*> pointers;
    explicit Args(std::vector<std::string> args) : strings(std::move(args)) {
        strings.insert(strings.begin(), "tool");
        for (std::string& s : strings) pointers.push_back(s.data());
    }
    int argc() const { return static_cast<int>(pointers.size()); }
    char** argv() { return pointers.data(); }
};

TEST(Cli, WholeNumbersSayWhatIsWrong) {
    EXPECT_EQ(cli::whole_number("--n", "0", 0, 10), 0u);
    EXPECT_EQ(cli::whole_number("--n", "007", 0, 10), 7u);
    EXPECT_EQ(cli::whole_number("--seed", "18446744073709551615", 0, UINT64_MAX), UINT64_MAX);
    EXPECT_EQ(error_of([] { cli::whole_number("--batch", "99999999999", 1, 2147483647); }),
              "option --batch: 99999999999 is too large (at most 2147483647)");
    EXPECT_EQ(error_of([] { cli::whole_number("--seed", "18446744073709551616", 0, UINT64_MAX); }),
              "option --seed: 18446744073709551616 is too large (at most 18446744073709551615)");
    EXPECT_EQ(error_of([] { cli::whole_number("--batch", "0", 1, 10); }), "option --batch: 0 is too small (at least 1)");
    // strtoull would read "-1" as 2^64 - 1, and "abc" as 0.
    EXPECT_EQ(error_of([] { cli::whole_number("--seed", "-1", 0, UINT64_MAX); }),
              "option --seed: -1 is too small (at least 0)");
    EXPECT_EQ(error_of([] { cli::whole_number("--seed", "-99999999999999999999999", 0, UINT64_MAX); }),
              "option --seed: -99999999999999999999999 is too small (at least 0)");
    for (const char* bad : {"abc", "", "-", "1.5", "1e3", " 1", "1 ", "+1", "0x10", "12abc"})
        EXPECT_EQ(error_of([&] { cli::whole_number("--seed", bad, 0, UINT64_MAX); }),
                  std::string("option --seed: '") + bad + "' is not a whole number");
}

TEST(Cli, RealNumbersSayWhatIsWrong) {
    using cli::above;
    using cli::at_least;
    using cli::at_most;
    using cli::below;
    EXPECT_EQ(cli::real_number("--x", "0.5", at_least(0), below(1), false), 0.5);
    EXPECT_EQ(cli::real_number("--x", "0", at_least(0), below(1), false), 0.0);
    EXPECT_EQ(cli::real_number("--x", "1", at_least(0), at_most(1), false), 1.0);
    struct Case {
        const char* value;
        cli::Bound low, high;
        const char* message;  // after "option --x: "
    };
    const Case cases[] = {
        {"1", at_least(0), below(1), "1 is too large (must be below 1)"},
        {"0", above(0), at_most(1e30), "0 is too small (must be above 0)"},
        {"-0.1", at_least(0), at_most(1e30), "-0.1 is too small (at least 0)"},
        {"1.5", at_least(0), at_most(1), "1.5 is too large (at most 1)"},
        // Too large for a double is still a number, too large; infinity and NaN are not taken.
        {"1e999", at_least(0), at_most(1e30), "1e999 is too large (at most 1e+30)"},
        {"inf", at_least(0), at_most(1e30), "'inf' is not a finite number"},
        {"-infinity", at_least(0), at_most(1e30), "'-infinity' is not a finite number"},
    };
    for (const Case& c : cases)
        EXPECT_EQ(error_of([&] { cli::real_number("--x", c.value, c.low, c.high, true); }),
                  std::string("option --x: ") + c.message);
    for (const char* bad : {"nan", "abc", "", " 1", "1x", "0.5.5"})
        EXPECT_EQ(error_of([&] { cli::real_number("--lr", bad, at_least(0), at_most(1), false); }),
                  std::string("option --lr: '") + bad + "' is not a number");
}

TEST(Cli, FloatFieldsAreCheckedAsTheFloatTheProgramUses) {
    using cli::above;
    using cli::at_least;
    using cli::below;
    // Both round to a float that leaves the domain: 1 for beta, 0 for eps.
    EXPECT_EQ(error_of([] { cli::real_number("--beta2", "0.99999999999", at_least(0), below(1), true); }),
              "option --beta2: 0.99999999999 (1 in single precision) is too large (must be below 1)");
    EXPECT_EQ(error_of([] { cli::real_number("--eps", "1e-50", above(0), below(1), true); }),
              "option --eps: 1e-50 (0 in single precision) is too small (must be above 0)");
    EXPECT_GT(cli::real_number("--eps", "1e-50", above(0), below(1), false), 0.0);  // a double holds it
    // A float field's largest value is FLT_MAX.
    float f = 0;
    const cli::Option lr = cli::real("--lr", "LR", "", f, at_least(0));
    EXPECT_EQ(error_of([&] { lr.set("1e39"); }), "option --lr: 1e39 is too large (at most 3.40282e+38)");
    lr.set("2.5");
    EXPECT_EQ(f, 2.5f);
}

// A small tool: two numbers, a path that is required, and a name with its own check.
struct Tool {
    int count = 3;
    double ratio = 0.5;
    std::string out, name = "x";
    std::vector<cli::Option> table() {
        return {cli::whole("--count", "N", "how many", count, 1, 100),
                cli::real("--ratio", "F", "a share", ratio, cli::at_least(0), cli::below(1)),
                cli::required(cli::text("--out", "PATH", "where to write", out)),
                cli::text("--name", "NAME", "a name", name, [](const std::string& v) {
                    if (v == "bad") throw Error("name 'bad' is not allowed");
                })};
    }
};

std::string parse_error(std::vector<std::string> args, bool operands = false) {
    Tool tool;
    Args a(std::move(args));
    return error_of([&] { cli::parse(a.argc(), a.argv(), tool.table(), operands); });
}

TEST(Cli, ParsesBothFormsInOrder) {
    Tool tool;
    Args a({"--count", "7", "--ratio=0.25", "--out", "o.bin", "--count=9", "--name=--odd"});
    const cli::Parsed parsed = cli::parse(a.argc(), a.argv(), tool.table(), false);
    EXPECT_FALSE(parsed.help);
    EXPECT_TRUE(parsed.operands.empty());
    EXPECT_EQ(tool.count, 9);  // the last one wins
    EXPECT_EQ(tool.ratio, 0.25);
    EXPECT_EQ(tool.out, "o.bin");
    EXPECT_EQ(tool.name, "--odd");  // a value that starts with -- needs the = form
}

TEST(Cli, OperandsOnlyWhereTheToolTakesThem) {
    Tool tool;
    Args a({"a.txt", "--out", "o", "-", "--", "--count", "-b.txt"});
    const cli::Parsed parsed = cli::parse(a.argc(), a.argv(), tool.table(), true);
    EXPECT_EQ(parsed.operands, (std::vector<std::string>{"a.txt", "-", "--count", "-b.txt"}));
    EXPECT_EQ(tool.count, 3);
    EXPECT_EQ(parse_error({"--out", "o", "a.txt"}),
              "unexpected argument 'a.txt': this tool takes only options (see --help)");
}

TEST(Cli, HelpStopsParsing) {
    for (const char* help : {"--help", "-h"}) {
        Tool tool;
        Args a({"--count", "5", help, "--count", "bogus"});  // --out is not needed with --help
        EXPECT_TRUE(cli::parse(a.argc(), a.argv(), tool.table(), false).help);
        EXPECT_EQ(tool.count, 5);
    }
    EXPECT_EQ(parse_error({"--help=yes"}), "option --help takes no value");
}

TEST(Cli, MistakesAreOneLineNamingTheOption) {
    EXPECT_EQ(parse_error({"--out", "o", "--bogus", "1"}), "unknown option '--bogus' (see --help)");
    EXPECT_EQ(parse_error({"--out", "o", "-x"}), "unknown option '-x' (see --help)");
    EXPECT_EQ(parse_error({"--out", "o", "--count"}), "option --count needs a value (N)");
    EXPECT_EQ(parse_error({"--count", "--out", "o"}), "option --count needs a value (N)");
    EXPECT_EQ(parse_error({"--out="}), "option --out: the value is empty (expected PATH)");
    EXPECT_EQ(parse_error({"--count", "5"}), "option --out PATH is required (see --help)");
    EXPECT_EQ(parse_error({"--out", "o", "--count", "101"}), "option --count: 101 is too large (at most 100)");
    EXPECT_EQ(parse_error({"--out", "o", "--ratio=1"}), "option --ratio: 1 is too large (must be below 1)");
    EXPECT_EQ(parse_error({"--out", "o", "--name", "bad"}), "name 'bad' is not allowed");
}

TEST(Cli, HelpListsEveryOptionWithItsDefault) {
    Tool tool;
    const std::string help = cli::describe(tool.table());
    EXPECT_NE(help.find("  --count N               how many [3]\n"), std::string::npos) << help;
    EXPECT_NE(help.find("  --ratio F               a share [0.5]\n"), std::string::npos) << help;
    EXPECT_NE(help.find("  --out PATH              where to write [required]\n"), std::string::npos) << help;
    EXPECT_NE(help.find("  --help                  this text\n"), std::string::npos) << help;
    // Long help texts wrap under their column; no line is wider than 100 characters.
    std::vector<cli::Option> wide = tool.table();
    wide[0].help = std::string(150, 'a').replace(40, 1, " ").replace(90, 1, " ");
    size_t start = 0;
    for (const std::string text = cli::describe(wide); start < text.size();) {
        const size_t end = text.find('\n', start);
        EXPECT_LE(end - start, 100u) << text.substr(start, end - start);
        start = end + 1;
    }
}

// The trainers' table: every numeric option has its real domain.
TEST(TrainOptions, EveryNumberIsCheckedAgainstItsDomain) {
    const TrainOptions defaults = default_options(false);
    auto parse = [&](std::vector<std::string> args) {
        Args a(std::move(args));
        bool help = false;
        return parse_options(a.argc(), a.argv(), defaults, help);
    };
    auto error = [&](std::vector<std::string> args) { return error_of([&] { parse(args); }); };

    const TrainOptions o = parse({"--batch=4", "--seq", "32", "--lr", "0", "--beta1", "0", "--beta2", "0.999",
                                  "--min-lr-frac", "1", "--seed", "18446744073709551615", "--threads", "1024",
                                  "--total-batch", "9223372036854775807", "--temperature", "0.001"});
    EXPECT_EQ(o.batch, 4);
    EXPECT_EQ(o.seq, 32);
    EXPECT_EQ(o.lr, 0.0f);
    EXPECT_EQ(o.adamw.beta2, 0.999f);
    EXPECT_EQ(o.seed, UINT64_MAX);
    EXPECT_EQ(o.threads, 1024);
    EXPECT_EQ(o.total_batch, INT64_MAX);

    EXPECT_EQ(error({"--batch", "99999999999"}), "option --batch: 99999999999 is too large (at most 2147483647)");
    EXPECT_EQ(error({"--batch", "0"}), "option --batch: 0 is too small (at least 1)");
    EXPECT_EQ(error({"--steps", "0"}), "option --steps: 0 is too small (at least 1)");
    EXPECT_EQ(error({"--beta1", "1"}), "option --beta1: 1 is too large (must be below 1)");
    EXPECT_EQ(error({"--beta2", "-0.5"}), "option --beta2: -0.5 is too small (at least 0)");
    EXPECT_EQ(error({"--eps", "0"}), "option --eps: 0 is too small (must be above 0)");
    EXPECT_EQ(error({"--lr", "-1e-4"}), "option --lr: -1e-4 is too small (at least 0)");
    EXPECT_EQ(error({"--lr", "inf"}), "option --lr: 'inf' is not a finite number");
    EXPECT_EQ(error({"--lr", "nan"}), "option --lr: 'nan' is not a number");
    EXPECT_EQ(error({"--min-lr-frac", "1.01"}), "option --min-lr-frac: 1.01 is too large (at most 1)");
    EXPECT_EQ(error({"--weight-decay", "-1"}), "option --weight-decay: -1 is too small (at least 0)");
    EXPECT_EQ(error({"--grad-clip", "-1"}), "option --grad-clip: -1 is too small (at least 0)");
    EXPECT_EQ(error({"--temperature", "0"}), "option --temperature: 0 is too small (must be above 0)");
    EXPECT_EQ(error({"--threads", "1025"}), "option --threads: 1025 is too large (at most 1024)");
    EXPECT_EQ(error({"--seed", "abc"}), "option --seed: 'abc' is not a whole number");
    EXPECT_EQ(error({"--seed", "-1"}), "option --seed: -1 is too small (at least 0)");
    EXPECT_EQ(error({"--total-batch", "-5"}), "option --total-batch: -5 is too small (at least 0)");
    EXPECT_EQ(error({"--top-k", "1.5"}), "option --top-k: '1.5' is not a whole number");
    EXPECT_EQ(error({"--model", "gpt5"}).find("unknown model 'gpt5'"), 0u);
    EXPECT_EQ(error({"--init", "a", "--resume", "b"}), "options --init and --resume exclude each other");
}

// Whether --batch was given, whatever its value: a default batch may be split to fit the
// memory (train/loop.h), a given one never.
TEST(TrainOptions, BatchGivenIsRecorded) {
    const TrainOptions defaults = default_options(true);
    const auto given = [&](std::vector<std::string> args) {
        Args a(std::move(args));
        bool help = false;
        return parse_options(a.argc(), a.argv(), defaults, help).batch_given;
    };
    EXPECT_FALSE(defaults.batch_given);
    EXPECT_FALSE(given({}));
    EXPECT_FALSE(given({"--seq", "128", "--total-batch", "65536"}));
    EXPECT_TRUE(given({"--batch", "4"}));
    EXPECT_TRUE(given({"--batch=16"}));  // the default's value, given: not split either
}

// A resumed run: the defaults, then the options its checkpoint carries, then the command line;
// an option given again with another value is noted, one with the same value is not.
TEST(TrainOptions, ResumeTakesTheSavedRunsOptions) {
    const TrainOptions defaults = default_options(false);
    TrainOptions run = defaults;
    run.steps = 40;
    run.lr = 3.14159274e-3f;  // needs every digit to come back
    run.save = "runs/a b.ckpt";
    run.log = "runs/s.jsonl";
    run.val_batches = 2;
    run.threads = 1;     // the machine's: not carried
    run.stop_after = 20;  // decided once: not carried
    RunState saved;
    saved.recorded = true;
    saved.options = carried_options(run);
    for (const auto& [name, value] : saved.options) {
        EXPECT_NE(name, "--threads");
        EXPECT_NE(name, "--stop-after");
        EXPECT_NE(name, "--eval");  // empty: not given
    }

    Args alone({"--resume", "runs/a b.ckpt"});
    const TrainOptions o = resume_options(alone.argc(), alone.argv(), defaults, saved);
    EXPECT_EQ(o.steps, 40);
    EXPECT_EQ(o.lr, run.lr);
    EXPECT_EQ(o.save, "runs/a b.ckpt");
    EXPECT_EQ(o.log, "runs/s.jsonl");
    EXPECT_EQ(o.val_batches, 2);
    EXPECT_EQ(o.threads, defaults.threads);
    EXPECT_EQ(o.stop_after, 0);
    EXPECT_TRUE(o.batch_given);  // the saved run's batch is never split again
    EXPECT_TRUE(o.notes.empty());
    EXPECT_EQ(carried_options(o), saved.options);

    Args again({"--resume", "x", "--steps", "200", "--log", "runs/s.jsonl", "--threads", "2", "--save", "b.ckpt"});
    const TrainOptions p = resume_options(again.argc(), again.argv(), defaults, saved);
    EXPECT_EQ(p.steps, 200);
    EXPECT_EQ(p.threads, 2);
    EXPECT_EQ(p.notes, (std::vector<std::string>{
                           "--save b.ckpt (given) where the saved run had runs/a b.ckpt",
                           "--steps 200 (given) where the saved run had 40: from here on it is another run"}));

    // A version 2 checkpoint carries no options: its header's numbers stand in for them.
    RunState v2;
    v2.recorded = true;
    v2.batch = 3, v2.seq = 17, v2.micro_batches = 2, v2.world = 1, v2.steps = 99, v2.warmup = 5, v2.lr = 6e-4f;
    v2.seed = 5, v2.min_lr_frac = 0.1f, v2.weight_decay = 0.1f, v2.beta1 = 0.9f, v2.beta2 = 0.95f, v2.eps = 1e-8f;
    const TrainOptions q = resume_options(alone.argc(), alone.argv(), defaults, v2);
    EXPECT_EQ(std::tie(q.batch, q.seq, q.total_batch, q.steps, q.warmup, q.lr, q.seed),
              std::tie(v2.batch, v2.seq, static_cast<const long long&>(102LL), v2.steps, v2.warmup, v2.lr, v2.seed));

    // What a resumed run combines includes what its checkpoint carries: --eval-every alone is
    // fine when the run had --eval (checked by resume_options, not by parse_options).
    run.eval_file = "hellaswag.jsonl";
    run.eval_every = 10;
    RunState with_eval = saved;
    with_eval.options = carried_options(run);
    Args eval_every({"--resume", "x", "--eval-every", "5"});
    bool help = false;
    EXPECT_NO_THROW(parse_options(eval_every.argc(), eval_every.argv(), defaults, help));
    EXPECT_EQ(resume_options(eval_every.argc(), eval_every.argv(), defaults, with_eval).eval_every, 5);
    EXPECT_EQ(error_of([&] { resume_options(eval_every.argc(), eval_every.argv(), defaults, saved); }),
              "--eval-every 5 needs --eval FILE, the HellaSwag examples");

    RunState odd = saved;
    odd.options.emplace_back("--colour", "blue");
    EXPECT_EQ(error_of([&] { resume_options(alone.argc(), alone.argv(), defaults, odd); }),
              "the checkpoint's run has option --colour, which this trainer does not take");
    odd.options.back() = {"--steps", "0"};
    EXPECT_EQ(error_of([&] { resume_options(alone.argc(), alone.argv(), defaults, odd); }),
              "the checkpoint's run: option --steps: 0 is too small (at least 1)");
}

// A flag takes no value: "--profile" turns it on, "--profile=yes" is a mistake, and a word after
// it is not swallowed as its value.
TEST(Cli, FlagsTakeNoValue) {
    const TrainOptions defaults = default_options(false);
    EXPECT_FALSE(defaults.profile);
    bool help = false;
    Args a({"--profile", "--steps", "3"});
    const TrainOptions o = parse_options(a.argc(), a.argv(), defaults, help);
    EXPECT_TRUE(o.profile);
    EXPECT_EQ(o.steps, 3);
    Args b({"--profile=yes"});
    EXPECT_EQ(error_of([&] { parse_options(b.argc(), b.argv(), defaults, help); }), "option --profile takes no value");
    Args c({"--profile", "7"});
    EXPECT_EQ(error_of([&] { parse_options(c.argc(), c.argv(), defaults, help); }),
              "unexpected argument '7': this tool takes only options (see --help)");
    const std::string usage_text = usage("train", defaults, "title");
    EXPECT_NE(usage_text.find("  --profile               time one step"), std::string::npos) << usage_text;
    // What does not train has no step to time.
    Args d({"--profile", "--prompt", "Hello"});
    EXPECT_EQ(error_of([&] { parse_options(d.argc(), d.argv(), defaults, help); }),
              "--profile times a training step; --prompt does not train");
    Args e({"--profile", "--eval", "h.bin"});
    EXPECT_EQ(error_of([&] { parse_options(e.argc(), e.argv(), defaults, help); }),
              "--profile times a training step; --eval without --eval-every does not train");
}

TEST(TrainOptions, HelpShowsTheDefaults) {
    const std::string help = usage("train", default_options(true), "title");
    EXPECT_EQ(help.find("title\n\nusage: train [options]\n"), 0u) << help;
    EXPECT_NE(help.find("  --batch B               sequences per micro-batch; when not given"), std::string::npos) << help;
    EXPECT_NE(help.find("with the same tokens per step [16]\n"), std::string::npos) << help;
    EXPECT_NE(help.find("  --lr LR                 peak learning rate [0.0006]\n"), std::string::npos) << help;
    EXPECT_NE(help.find("  --save PATH             write a checkpoint (with optimizer state) at the end [none]\n"),
              std::string::npos)
        << help;
}

}  // namespace
}  // namespace gpt
