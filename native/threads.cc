#include "threads.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace svc {
namespace {

struct Job {
  const std::function<void(size_t)>* fn;
  size_t n;
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::exception_ptr error;
  std::mutex error_mu;
};

thread_local bool in_pool_task = false;

class Pool {
 public:
  explicit Pool(int n) : nthreads_(n) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return nthreads_; }

  void run(size_t n, const std::function<void(size_t)>& fn) {
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->n = n;
    {
      std::lock_guard<std::mutex> g(mu_);
      jobs_.push_back(job);
    }
    cv_.notify_all();
    work_on(*job);
    {
      std::unique_lock<std::mutex> lk(mu_);
      // Remove it from the queue so idle workers stop looking at it.
      for (auto it = jobs_.begin(); it != jobs_.end(); ++it)
        if (it->get() == job.get()) {
          jobs_.erase(it);
          break;
        }
      done_cv_.wait(lk, [&] { return job->done.load() == job->n; });
    }
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  void work_on(Job& job) {
    bool prev = in_pool_task;
    in_pool_task = true;
    for (;;) {
      size_t i = job.next.fetch_add(1);
      if (i >= job.n) break;
      try {
        (*job.fn)(i);
      } catch (...) {
        std::lock_guard<std::mutex> g(job.error_mu);
        if (!job.error) job.error = std::current_exception();
      }
      if (job.done.fetch_add(1) + 1 == job.n) {
        std::lock_guard<std::mutex> g(mu_);
        done_cv_.notify_all();
      }
    }
    in_pool_task = prev;
  }

  void loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] {
          if (stop_) return true;
          for (auto& j : jobs_)
            if (j->next.load() < j->n) return true;
          return false;
        });
        if (stop_) return;
        for (auto& j : jobs_)
          if (j->next.load() < j->n) {
            job = j;
            break;
          }
      }
      if (job) work_on(*job);
    }
  }

  int nthreads_;
  std::vector<std::thread> workers_;
  std::deque<std::shared_ptr<Job>> jobs_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  bool stop_ = false;
};

int configured_threads() {
  const char* s = std::getenv("SVC_TT_THREADS");
  if (s && *s) {
    char* end = nullptr;
    long v = std::strtol(s, &end, 10);
    if (end && *end == '\0' && v >= 1 && v <= 1024) return static_cast<int>(v);
  }
  unsigned h = std::thread::hardware_concurrency();
  return h == 0 ? 1 : static_cast<int>(h);
}

Pool& pool() {
  // Leaked on purpose: joining threads during static destruction at exit can deadlock.
  static Pool* p = new Pool(configured_threads());
  return *p;
}

}  // namespace

int pool_threads() { return pool().size(); }

void parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (n == 1 || in_pool_task || pool().size() == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  pool().run(n, fn);
}

}  // namespace svc
