// ThreadPool: persistent worker threads for the CPU backend, so that timing a kernel never
// measures thread creation. Threads are created on first need and kept until destruction.
//
// Thread-safety: ParallelFor must not be called concurrently or re-entrantly (the backend
// that owns the pool is itself single-threaded).
#ifndef FUSETUNE_KERNELS_CPU_THREAD_POOL_H_
#define FUSETUNE_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fusetune::cpu {

class ThreadPool {
 public:
  ThreadPool() = default;
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Calls fn(task, worker) for every task in [0, num_tasks) on `workers` threads (the caller
  // is worker 0, pool threads are 1..workers-1), handing out tasks dynamically in increasing
  // order. Returns when every task has finished. `fn` must not throw.
  void ParallelFor(int workers, int64_t num_tasks, const std::function<void(int64_t, int)>& fn);

  // Pool threads created so far (not counting callers).
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void EnsureThreads(int count);
  void ThreadMain(int worker, uint64_t seen);
  void RunTasks(int worker);

  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
  uint64_t generation_ = 0;  // bumped for every ParallelFor round
  int round_workers_ = 0;    // workers taking part in the current round
  int running_ = 0;          // pool threads still busy in the current round
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
};

}  // namespace fusetune::cpu

#endif  // FUSETUNE_KERNELS_CPU_THREAD_POOL_H_
