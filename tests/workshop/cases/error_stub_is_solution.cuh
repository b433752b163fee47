// A STUB that is the solution again (up to spacing): the exercise would come solved.
// EXERCISE BEGIN stage00.answer TESTS Constants\.Answer
constexpr int kWidth = 768;
// EXERCISE STUB constexpr int kWidth =   768;
// EXERCISE END
