#include "thread_pool.h"

namespace fusetune::cpu {

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::EnsureThreads(int count) {
  while (static_cast<int>(threads_.size()) < count) {
    const int worker = static_cast<int>(threads_.size()) + 1;
    // The thread starts from the current generation, so it joins the next round even if it
    // is scheduled only after that round has been announced.
    threads_.emplace_back([this, worker, seen = generation_] { ThreadMain(worker, seen); });
  }
}

void ThreadPool::RunTasks(int worker) {
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= num_tasks_) return;
    (*fn_)(task, worker);
  }
}

void ThreadPool::ThreadMain(int worker, uint64_t seen) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      if (worker >= round_workers_) continue;  // not needed this round
    }
    RunTasks(worker);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--running_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int workers, int64_t num_tasks,
                             const std::function<void(int64_t, int)>& fn) {
  if (num_tasks <= 0) return;
  if (workers > num_tasks) workers = static_cast<int>(num_tasks);
  if (workers <= 1) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  EnsureThreads(workers - 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    num_tasks_ = num_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    round_workers_ = workers;
    running_ = workers - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  RunTasks(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return running_ == 0; });
  fn_ = nullptr;
}

}  // namespace fusetune::cpu
