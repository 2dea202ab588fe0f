// worker_common's device half: --device parsing into LoadPhaseModel (a GPU in a CPU build is a
// clear error), the KV staging of the CPU pool (in place, and staged with memcpy as the fake
// device), the staging buffer cache and the completion thread.
#include "worker_common/kv_staging.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "tests/unit/engine/tiny_model.h"
#include "worker_common/completion_thread.h"
#include "worker_common/device_backend.h"
#include "worker_common/phase_model.h"
#include "worker_common/worker_identity.h"

namespace dq::worker {
namespace {

PhaseModelOptions Tiny(const std::string& device) {
  PhaseModelOptions o;
  o.model = dq::testing::TinyQwen3Path();
  o.threads = 1;
  o.kv_capacity_tokens = 256;
  o.device = device;
  return o;
}

TEST(LoadPhaseModel, CpuDeviceKeepsKvInPlace) {
  auto pm = LoadPhaseModel(Tiny("cpu"));
  ASSERT_TRUE(pm.ok()) << pm.status();
  EXPECT_EQ((*pm)->device.name(), "cpu");
  ASSERT_NE((*pm)->kv_staging, nullptr);
  KvStaging& s = *(*pm)->kv_staging;
  EXPECT_FALSE(s.staged());
  EXPECT_EQ(s.kv_dtype(), "f32");
  KvBlockPool& pool = (*pm)->runner->kv_pool();
  EXPECT_EQ(s.host_tensor(kKeys), reinterpret_cast<char*>(pool.keys_data()));
  EXPECT_EQ(s.host_tensor(kValues), reinterpret_cast<char*>(pool.values_data()));
  EXPECT_EQ(s.geometry().block_bytes, pool.block_bytes());
  EXPECT_EQ(s.geometry().layer_stride_bytes(), pool.layer_stride_bytes());
  EXPECT_EQ(s.geometry().tensor_bytes(), pool.region_bytes());
  EXPECT_EQ(s.geometry().offset(1, 3), pool.block_offset(1, 3));
  EXPECT_EQ(KvLayoutOf(**pm).kv_dtype(), "f32");
}

TEST(LoadPhaseModel, BadDeviceNamesTheSpellings) {
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CUDA"}) {
    auto pm = LoadPhaseModel(Tiny(bad));
    ASSERT_FALSE(pm.ok()) << bad;
    EXPECT_EQ(pm.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(pm.status().message().find("cpu, cuda, cuda:N"), std::string::npos) << pm.status();
  }
}

TEST(LoadPhaseModel, GpuWithoutCudaIsAClearError) {
  if (BuiltWithCuda()) GTEST_SKIP() << "a CUDA build: the GPU tests cover --device cuda";
  for (const char* device : {"cuda", "cuda:1"}) {
    // Refused before the weights are read: the model path is not even looked at.
    PhaseModelOptions o = Tiny(device);
    o.model = "/no/such/model";
    auto pm = LoadPhaseModel(o);
    ASSERT_FALSE(pm.ok()) << device;
    EXPECT_EQ(pm.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(pm.status().message().find("built without CUDA"), std::string::npos) << pm.status();
    EXPECT_NE(pm.status().message().find("release-cuda"), std::string::npos) << pm.status();
  }
  auto factory = BackendForDevice(DeviceSpec{}, {});
  ASSERT_TRUE(factory.ok());
  EXPECT_FALSE(static_cast<bool>(*factory));  // the CPU backend
}

// The staged CPU pool: the fake device both workers' staged paths are tested with.
TEST(HostCopyKvStaging, CopiesInAndOutOfThePoolInOrder) {
  KvCacheOptions kv;
  kv.num_layers = 3;
  kv.num_kv_heads = 2;
  kv.head_dim = 4;
  kv.block_size = 4;
  kv.num_blocks = 10;
  KvBlockPool pool(kv);
  std::unique_ptr<KvStaging> s = CreateHostCopyKvStaging(pool);
  EXPECT_TRUE(s->staged());
  EXPECT_EQ(s->host_tensor(kKeys), nullptr);
  const KvTensorLayout& g = s->geometry();
  EXPECT_EQ(g.block_bytes, 4u * 2 * 4 * sizeof(float));
  EXPECT_EQ(g.num_blocks, 10);
  EXPECT_EQ(g.block_size, 4);

  auto host = s->AllocateHost(4 * g.block_bytes);
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_GE((*host)->bytes(), 4 * g.block_bytes);
  float* h = reinterpret_cast<float*>((*host)->data());
  const int per_block = static_cast<int>(g.block_bytes / sizeof(float));
  for (int i = 0; i < 2 * per_block; ++i) h[i] = 100.0f + i;
  // Two blocks into K layer 2 blocks 5..6.
  const KvCopy in[] = {{kKeys, 0, g.offset(2, 5), 2 * g.block_bytes}};
  ASSERT_TRUE(s->CopyIn(in, (*host)->data()).ok());
  EXPECT_EQ(pool.key(2, 5, 0)[0], 100.0f);
  EXPECT_EQ(pool.key(2, 6, 3)[7], 100.0f + 2 * per_block - 1);
  EXPECT_EQ(pool.value(2, 5, 0)[0], 0.0f);

  // Out again, into the buffer's third block; `then` runs later, in order.
  std::vector<int> order;
  std::vector<absl::Status> got;
  s->CopyOut({{kKeys, 2 * g.block_bytes, g.offset(2, 6), g.block_bytes}}, (*host)->data(),
             [&](absl::Status st) {
               order.push_back(1);
               got.push_back(st);
             });
  s->CopyOut({{kValues, 0, g.tensor_bytes(), 4}}, (*host)->data(), [&](absl::Status st) {
    order.push_back(2);
    got.push_back(st);
  });
  s->Drain();
  ASSERT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_TRUE(got[0].ok()) << got[0];
  EXPECT_EQ(got[1].code(), absl::StatusCode::kOutOfRange) << got[1];
  EXPECT_EQ(std::memcmp((*host)->data() + 2 * g.block_bytes, pool.key(2, 6, 0), g.block_bytes), 0);
  // A copy outside the cache is refused before any byte moves.
  const KvCopy bad[] = {{kValues, 0, g.tensor_bytes() - 4, 8}};
  EXPECT_EQ(s->CopyIn(bad, (*host)->data()).code(), absl::StatusCode::kOutOfRange);
}

TEST(HostBufferCache, ReusesFreedBuffersOfAboutTheSizeWithinItsBound) {
  int allocations = 0, frees = 0;
  HostBufferCache cache(
      [&](uint64_t bytes) -> absl::StatusOr<void*> {
        ++allocations;
        return static_cast<void*>(new char[bytes]);
      },
      [&](void* p) {
        ++frees;
        delete[] static_cast<char*>(p);
      },
      /*max_cached_bytes=*/3 << 20);
  const uint64_t mib = 1 << 20;
  auto a = cache.Get(mib + 1);  // rounded up to 2 MiB
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->bytes(), 2 * mib);
  void* first = (*a)->data();
  a->reset();
  EXPECT_EQ(cache.cached_buffers(), 1);
  auto b = cache.Get(2 * mib);  // the same buffer again
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->data(), first);
  EXPECT_EQ(allocations, 1);
  auto c = cache.Get(5 * mib);  // too big for the cached one: a new buffer
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(allocations, 2);
  b->reset();
  c->reset();  // 2 + 5 MiB > 3 MiB: the second is freed, not cached
  EXPECT_EQ(cache.cached_buffers(), 1);
  EXPECT_EQ(cache.cached_bytes(), 2 * mib);
  EXPECT_EQ(frees, 1);
  auto small = cache.Get(1);  // 1 MiB: the 2 MiB buffer is at most twice that, reused
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->bytes(), 2 * mib);
  EXPECT_EQ(allocations, 2);
  small->reset();
}

TEST(CompletionThread, RunsInOrderAndDrainWaitsForAll) {
  CompletionThread t;
  std::atomic<int> last{0};
  std::vector<int> seen;
  for (int i = 1; i <= 20; ++i) {
    t.Push(
        [i]() -> absl::Status {
          if (i % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
          return i == 7 ? absl::InternalError("seven") : absl::OkStatus();
        },
        [&, i](absl::Status s) {
          EXPECT_EQ(s.ok(), i != 7);
          seen.push_back(i);
          last = i;
        });
  }
  t.Drain();
  EXPECT_EQ(last.load(), 20);
  ASSERT_EQ(seen.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(seen[i], i + 1);
}

}  // namespace
}  // namespace dq::worker
