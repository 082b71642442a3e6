// Loopback ports for tests that start servers (Prometheus, the fusetune daemons) on fixed
// addresses. Test support only.
//
// Thread-safety: pure functions (each asks the kernel).
#ifndef FUSETUNE_TESTS_COMMON_PORTS_H_
#define FUSETUNE_TESTS_COMMON_PORTS_H_

namespace fusetune::testing {

// A 127.0.0.1 port that was free a moment ago (the kernel picks it and it is released at
// once, so another process may take it before the caller does); 0 when none could be had.
int FreeLoopbackPort();

// Whether 127.0.0.1:`port` can be bound right now.
bool LoopbackPortIsFree(int port);

}  // namespace fusetune::testing

#endif  // FUSETUNE_TESTS_COMMON_PORTS_H_
