// The pipeline's admission and failure paths, with workers that are configured but not live
// (nothing is listening at their addresses and no probe runs). The paths that reach a worker are
// covered by the multi-process tests.
#include "router/request_pipeline.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/unit/router/router_test_model.h"

namespace dq::router {
namespace {

using std::chrono::milliseconds;

WorkerRegistryOptions DeadWorkers() {
  WorkerRegistryOptions o;
  o.prefill_addresses = {"127.0.0.1:1"};
  o.decode_addresses = {"127.0.0.1:1"};
  return o;
}

class RequestPipelineTest : public ::testing::Test {
 protected:
  explicit RequestPipelineTest(int max_queue = 1, milliseconds queue_timeout = milliseconds(5000))
      : model_(TestModel()),
        scheduler_(SchedulerOptions{1, max_queue, queue_timeout}),
        registry_(DeadWorkers()),
        pipeline_(PipelineOptions{milliseconds(10000), queue_timeout, milliseconds(100)}, model_,
                  scheduler_, registry_, metrics_) {}

  GenerationInput Input(const std::string& id) {
    GenerationInput in;
    in.request_id = id;
    in.prompt_ids = {1, 2, 3};
    in.max_tokens = 4;
    return in;
  }
  // Occupies the only slot, as a running request would.
  void HoldTheSlot() {
    EnqueueResult held = scheduler_.Enqueue("holder");
    ASSERT_TRUE(held.ok());
    ASSERT_TRUE(held.ticket->Wait().ok());
  }
  void WaitUntilQueued(int n) {
    for (int i = 0; i < 500 && scheduler_.counters().queued != n; ++i) {
      std::this_thread::sleep_for(milliseconds(2));
    }
    ASSERT_EQ(scheduler_.counters().queued, n);
  }

  ServedModel model_;
  Scheduler scheduler_;
  WorkerRegistry registry_;
  RouterMetrics metrics_;
  RequestPipeline pipeline_;
};

TEST_F(RequestPipelineTest, NoLiveWorkerIs503AndFreesTheSlot) {
  StartResult r = pipeline_.Start(Input("a"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error.http_status, 503);
  EXPECT_NE(r.error.message.find("No live decode worker"), std::string::npos) << r.error.message;
  EXPECT_EQ(scheduler_.counters().in_flight, 0);
  EXPECT_EQ(metrics_.count(Outcome::kError), 1u);
  EXPECT_FALSE(pipeline_.Abort("a"));  // no longer live
  // The slot is free again: the next request is admitted (and fails the same way).
  EXPECT_EQ(pipeline_.Start(Input("b")).error.http_status, 503);
  EXPECT_EQ(scheduler_.counters().admitted, 2u);
}

TEST_F(RequestPipelineTest, AbortWhileQueuedEndsTheRequestAndAReusedIdIsRefused) {
  HoldTheSlot();
  StartResult queued;
  std::thread t([&] { queued = pipeline_.Start(Input("q")); });
  WaitUntilQueued(1);
  StartResult dup = pipeline_.Start(Input("q"));
  EXPECT_EQ(dup.error.http_status, 409);
  EXPECT_TRUE(pipeline_.Abort("q"));
  t.join();
  ASSERT_FALSE(queued.ok());
  EXPECT_EQ(queued.error.http_status, 499);
  EXPECT_EQ(metrics_.count(Outcome::kAbort), 1u);
  EXPECT_EQ(scheduler_.counters().queued, 0);
  scheduler_.Release("holder");
}

TEST_F(RequestPipelineTest, CloseRefusesNewRequestsAndAbortsQueuedOnes) {
  HoldTheSlot();
  StartResult queued;
  std::thread t([&] { queued = pipeline_.Start(Input("q")); });
  WaitUntilQueued(1);
  pipeline_.Close();
  t.join();
  EXPECT_EQ(queued.error.http_status, 499);
  StartResult late = pipeline_.Start(Input("late"));
  EXPECT_EQ(late.error.http_status, 503);
  EXPECT_NE(late.error.message.find("shutting down"), std::string::npos);
  scheduler_.Release("holder");
}

class FullQueueTest : public RequestPipelineTest {
 protected:
  FullQueueTest() : RequestPipelineTest(/*max_queue=*/0) {}
};

TEST_F(FullQueueTest, AFullQueueIs429WithRetryAfter) {
  HoldTheSlot();
  StartResult r = pipeline_.Start(Input("x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error.http_status, 429);
  EXPECT_EQ(r.retry_after, "1");
  EXPECT_EQ(metrics_.count(Outcome::kRejected), 1u);
  scheduler_.Release("holder");
}

class ShortQueueTimeoutTest : public RequestPipelineTest {
 protected:
  ShortQueueTimeoutTest() : RequestPipelineTest(1, milliseconds(50)) {}
};

TEST_F(ShortQueueTimeoutTest, WaitingPastTheQueueTimeoutIs504) {
  HoldTheSlot();
  StartResult r = pipeline_.Start(Input("slow"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error.http_status, 504);
  EXPECT_EQ(metrics_.count(Outcome::kTimeout), 1u);
  scheduler_.Release("holder");
}

}  // namespace
}  // namespace dq::router
