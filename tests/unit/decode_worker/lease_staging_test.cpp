// The decode worker's KV staging (a device cache): which host range of a lease's staging buffer
// is which (run, layer, tensor) region, the copies that land it in the cache's blocks at commit
// (checked with a fake device that records them), and the whole path through the gRPC service
// with the CPU pool standing in for the device.
#include "decode_worker/lease_staging.h"

#include <gmock/gmock.h>

#include <cstring>

#include "decode_worker/lease_part_regions.h"
#include "tests/unit/decode_worker/decode_worker_fixture.h"

namespace dq::decode::testing {
namespace {

using ::testing::HasSubstr;
using worker::kKeys;
using worker::kValues;
using worker::KvCopy;

TEST(PlanLeaseStaging, RegionsAreContiguousHostRangesAndCopiesHitTheirBlocks) {
  const KvTensorLayout cache{2, 32, 16, 100};  // 2 layers, 32 blocks of 100 bytes
  const std::vector<BlockRun> runs = {{5, 1}, {20, 3}};
  const LeaseStagingPlan plan = PlanLeaseStaging(runs, cache);
  const uint64_t B = 100;
  EXPECT_EQ(plan.host_layer_stride, 4 * B);
  EXPECT_EQ(plan.host_bytes, 2 * 2 * 4 * B);  // [tensor][layer][4 prompt blocks]
  ASSERT_EQ(plan.regions.size(), 8u);         // 2 runs x 2 layers x K, V
  ASSERT_EQ(plan.copies.size(), 8u);          // one copy per region
  // Order: run, layer, tensor.
  const StagedRegion& r0 = plan.regions[0];
  EXPECT_EQ(r0.tensor, kKeys);
  EXPECT_EQ(r0.layer, 0);
  EXPECT_EQ(r0.run, (BlockRun{5, 1}));
  EXPECT_EQ(r0.host_offset, 0u);
  EXPECT_EQ(r0.bytes, B);
  const StagedRegion& last = plan.regions[7];  // run 1, layer 1, V
  EXPECT_EQ(last.tensor, kValues);
  EXPECT_EQ(last.layer, 1);
  EXPECT_EQ(last.run, (BlockRun{20, 3}));
  EXPECT_EQ(last.host_offset, 8 * B + 4 * B + 1 * B);  // V area, layer 1, after run 0's block
  EXPECT_EQ(last.bytes, 3 * B);
  EXPECT_EQ(plan.copies[7], (KvCopy{kValues, last.host_offset, cache.offset(1, 20), 3 * B}));
  EXPECT_EQ(plan.copies[2], (KvCopy{kKeys, 4 * B, cache.offset(1, 5), B}));
  // The regions tile the buffer exactly: no overlap, no gap.
  std::vector<int> cover(plan.host_bytes / B, 0);
  for (const StagedRegion& r : plan.regions) {
    for (uint64_t b = 0; b < r.bytes / B; ++b) ++cover[r.host_offset / B + b];
  }
  EXPECT_THAT(cover, ::testing::Each(1));
}

// A device cache in host memory that records every landing (and, with `device_view`, hands its
// memory out as device_tensor(), as a GPU cache does for nccl).
class FakeDevice final : public worker::KvStaging {
 public:
  explicit FakeDevice(const KvTensorLayout& g, bool device_view = false)
      : g_(g), device_view_(device_view) {
    for (auto& m : mem_) m.assign(g.tensor_bytes(), 0);
  }
  std::string_view kv_dtype() const override { return "bf16"; }
  const KvTensorLayout& geometry() const override { return g_; }
  char* host_tensor(int) override { return nullptr; }
  char* device_tensor(int t) override { return device_view_ ? mem_[t].data() : nullptr; }
  absl::StatusOr<std::unique_ptr<worker::HostBuffer>> AllocateHost(uint64_t bytes) override {
    struct Buffer final : worker::HostBuffer {
      std::vector<char> v;
      char* data() override { return v.data(); }
      uint64_t bytes() const override { return v.size(); }
    };
    auto b = std::make_unique<Buffer>();
    b->v.assign(bytes, 0);
    ++allocations;
    return b;
  }
  absl::Status CopyIn(std::span<const KvCopy> copies, const char* host) override {
    for (const KvCopy& c : copies) {
      std::memcpy(mem_[c.tensor].data() + c.cache_offset, host + c.host_offset, c.bytes);
      landed.push_back(c);
    }
    return absl::OkStatus();
  }
  void CopyOut(std::vector<KvCopy>, char*, std::function<void(absl::Status)> then) override {
    then(absl::UnimplementedError("decode never copies out"));
  }
  void Drain() override {}

  const char* block(int t, int layer, int b) const { return mem_[t].data() + g_.offset(layer, b); }
  std::vector<KvCopy> landed;
  int allocations = 0;

 private:
  KvTensorLayout g_;
  bool device_view_;
  std::vector<char> mem_[2];
};

// The byte a test writes into every byte of (tensor, layer, prompt block i).
char Pattern(int t, int layer, int i) { return static_cast<char>(1 + t * 64 + layer * 16 + i); }

TEST(LeasePartRegions, StagedLeaseLandsInItsBlocksAtCommit) {
  const KvTensorLayout cache{2, 40, 4, 64};
  FakeDevice device(cache);
  auto transport = kvtransfer::CreateTransport({.kind = "local"});
  ASSERT_TRUE(transport.ok()) << transport.status();
  LeasePartRegions regions(**transport, device, dqserve::v1::KvLayout());

  KvLease lease;
  lease.lease_id = "lease-1";
  lease.blocks = {5, 20, 21, 22, 30};  // the last block is for generated tokens
  lease.runs = ToBlockRuns(lease.blocks);
  auto parts = regions.Register(lease, /*prompt_tokens=*/4 * 4 - 2);  // 4 blocks
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 1u);  // the target's KV only
  const dqserve::v1::KvEndpoint* endpoint = &(*parts)[0].endpoint();
  EXPECT_EQ(device.allocations, 1);
  EXPECT_EQ(endpoint->transport(), "local");
  ASSERT_EQ(endpoint->regions_size(), 8);
  EXPECT_EQ(regions.num_regions(), 8);

  // The prefill worker's part: write each region from a source holding the pattern.
  const std::vector<int32_t> prompt = {5, 20, 21, 22};
  std::vector<char> source(4 * cache.block_bytes);
  auto src = (*transport)->RegisterRegion(source.data(), source.size());
  ASSERT_TRUE(src.ok());
  for (const auto& r : endpoint->regions()) {
    EXPECT_EQ(r.block_bytes(), cache.block_bytes);
    EXPECT_EQ(r.num_layers(), 1u);
    const int t = r.tensor() == dqserve::v1::KV_TENSOR_KEY ? kKeys : kValues;
    std::vector<kvtransfer::CopyOp> ops;
    for (uint32_t b = 0; b < r.num_blocks(); ++b) {
      const int i = static_cast<int>(
          std::find(prompt.begin(), prompt.end(), static_cast<int32_t>(r.first_block() + b)) -
          prompt.begin());
      std::memset(source.data() + b * cache.block_bytes, Pattern(t, r.first_layer(), i),
                  cache.block_bytes);
      ops.push_back({b * cache.block_bytes, b * cache.block_bytes, cache.block_bytes});
    }
    auto remote = (*transport)->Prepare(r.region_descriptor());
    ASSERT_TRUE(remote.ok()) << remote.status();
    auto id = (*transport)->Post(src->id, *remote, ops);
    ASSERT_TRUE(id.ok()) << id.status();
    ASSERT_TRUE(kvtransfer::WaitForTransfer(**transport, *id, 1000).ok());
    ASSERT_TRUE((*transport)->ReleaseRemote(*remote).ok());
  }
  // Nothing reaches the cache before the commit lands it.
  EXPECT_EQ(device.block(kKeys, 0, 5)[0], 0);

  ASSERT_TRUE(regions.Land("lease-1").ok());
  // One copy per (run, layer, tensor), each a whole run.
  ASSERT_EQ(device.landed.size(), 8u);
  for (const KvCopy& c : device.landed) {
    EXPECT_TRUE(c.bytes == cache.block_bytes || c.bytes == 3 * cache.block_bytes) << c.bytes;
  }
  for (int t : {kKeys, kValues}) {
    for (int layer = 0; layer < 2; ++layer) {
      for (int i = 0; i < 4; ++i) {
        const char* got = device.block(t, layer, prompt[i]);
        for (uint64_t k = 0; k < cache.block_bytes; ++k) {
          ASSERT_EQ(got[k], Pattern(t, layer, i)) << t << " " << layer << " " << i << " " << k;
        }
      }
      EXPECT_EQ(device.block(t, layer, 30)[0], 0);  // not a prompt block
      EXPECT_EQ(device.block(t, layer, 23)[0], 0);  // not the lease's
    }
  }
  regions.Release("lease-1");
  EXPECT_EQ(regions.num_regions(), 0);
  const absl::Status gone = regions.Land("lease-1");
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound) << gone;
  ASSERT_TRUE((*transport)->ReleaseRegion(src->id).ok());
}

// Direct (nccl): the regions are the cache's blocks themselves; no staging buffer, nothing to land.
TEST(LeasePartRegions, DirectLeaseIsWrittenStraightIntoItsBlocks) {
  const KvTensorLayout cache{2, 40, 4, 64};
  FakeDevice device(cache, /*device_view=*/true);
  auto transport = kvtransfer::CreateTransport({.kind = "local"});
  ASSERT_TRUE(transport.ok()) << transport.status();
  LeasePartRegions regions(**transport, device, dqserve::v1::KvLayout(), /*direct_for_tests=*/true);
  EXPECT_TRUE(regions.direct());
  KvLease lease;
  lease.lease_id = "lease-d";
  lease.blocks = {5, 20, 21, 30};
  lease.runs = ToBlockRuns(lease.blocks);
  auto parts = regions.Register(lease, /*prompt_tokens=*/3 * 4);  // blocks 5, 20, 21
  ASSERT_TRUE(parts.ok()) << parts.status();
  const dqserve::v1::KvEndpoint* endpoint = &(*parts)[0].endpoint();
  EXPECT_EQ(device.allocations, 0);  // no staging buffer
  ASSERT_EQ(endpoint->regions_size(), 8);
  std::vector<char> source(2 * cache.block_bytes);
  auto src = (*transport)->RegisterRegion(source.data(), source.size());
  ASSERT_TRUE(src.ok());
  for (const auto& r : endpoint->regions()) {
    EXPECT_EQ(r.layer_stride_bytes(), cache.layer_stride_bytes());  // the cache's own layout
    const int t = r.tensor() == dqserve::v1::KV_TENSOR_KEY ? kKeys : kValues;
    std::memset(source.data(), Pattern(t, r.first_layer(), static_cast<int>(r.first_block())),
                source.size());
    const kvtransfer::CopyOp op{0, 0, r.num_blocks() * cache.block_bytes};
    auto remote = (*transport)->Prepare(r.region_descriptor());
    ASSERT_TRUE(remote.ok()) << remote.status();
    auto id = (*transport)->Post(src->id, *remote, {&op, 1});
    ASSERT_TRUE(id.ok()) << id.status();
    ASSERT_TRUE(kvtransfer::WaitForTransfer(**transport, *id, 1000).ok());
    ASSERT_TRUE((*transport)->ReleaseRemote(*remote).ok());
  }
  // The bytes are in the blocks before any commit; landing copies nothing.
  for (int t : {kKeys, kValues}) {
    for (int layer = 0; layer < 2; ++layer) {
      EXPECT_EQ(device.block(t, layer, 5)[0], Pattern(t, layer, 5));
      EXPECT_EQ(device.block(t, layer, 21)[cache.block_bytes - 1], Pattern(t, layer, 20));
      EXPECT_EQ(device.block(t, layer, 30)[0], 0);  // generated tokens' block: untouched
      EXPECT_EQ(device.block(t, layer, 22)[0], 0);  // not the lease's
    }
  }
  ASSERT_TRUE(regions.Land("lease-d").ok());
  EXPECT_TRUE(device.landed.empty());
  regions.Release("lease-d");
  EXPECT_EQ(regions.num_regions(), 0);
  ASSERT_TRUE((*transport)->ReleaseRegion(src->id).ok());
}

TEST(LeasePartRegions, DirectOnAHostCacheIsRefused) {
  const KvTensorLayout cache{2, 40, 4, 64};
  FakeDevice device(cache, /*device_view=*/false);
  auto transport = kvtransfer::CreateTransport({.kind = "local"});
  ASSERT_TRUE(transport.ok());
  LeasePartRegions regions(**transport, device, dqserve::v1::KvLayout(), /*direct_for_tests=*/true);
  KvLease lease;
  lease.lease_id = "x";
  lease.blocks = {1};
  lease.runs = ToBlockRuns(lease.blocks);
  auto parts = regions.Register(lease, 4);
  ASSERT_FALSE(parts.ok());
  EXPECT_EQ(parts.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(regions.num_regions(), 0);
}

// The whole decode worker with a staged cache: the prefill writes into staging buffers over tcp,
// the commit lands them, and the stream equals colocated generation token for token.
TEST_F(DecodeWorkerTest, StagedKvDecodesLikeColocatedGeneration) {
  TearDownServer();
  StartServer(/*max_batch=*/2, /*lease_ttl_ms=*/30000, "tcp", /*staged=*/true);
  ASSERT_TRUE(phase_->kv_staging->staged());
  for (const std::string text : {"Hello there, how are you today?",
                                 "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22"}) {
    const auto prompt = Prompt(text);
    const v1::SamplingParams p = Greedy(20);
    const GenerationResult want = Colocated(prompt, p);
    const StreamResult got = Disaggregated("staged-" + std::to_string(prompt.size()), prompt, p);
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    EXPECT_EQ(got.reason, v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(got.tokens, want.tokens) << text;
  }
}

TEST_F(DecodeWorkerTest, StagedConcurrentRequestsEachLandInTheirOwnBlocks) {
  TearDownServer();
  StartServer(/*max_batch=*/2, /*lease_ttl_ms=*/30000, "tcp", /*staged=*/true);
  const std::vector<std::string> texts = {"one two three", "The capital of France is",
                                          "a b c d e f g h i j k l m n o p q r s t u v w x y z"};
  std::vector<std::vector<int32_t>> want;
  std::vector<v1::KvCommit> commits;  // every lease filled before any commit lands
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto prompt = Prompt(texts[i]);
    want.push_back(Colocated(prompt, Greedy(12)).tokens);
    auto lease = Reserve("c" + std::to_string(i), prompt.size(), 12);
    ASSERT_TRUE(lease.ok()) << lease.status();
    commits.push_back(Prefill(*lease, prompt, Greedy(12)));
  }
  std::vector<StreamResult> got(texts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < texts.size(); ++i) {
    threads.emplace_back(
        [&, i] { got[i] = Decode("c" + std::to_string(i), commits[i], Greedy(12)); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, want[i]) << texts[i];
  }
}

// The whole decode worker receiving straight into its "device" cache (as with nccl): the stream
// equals colocated generation, and nothing is staged.
TEST_F(DecodeWorkerTest, DirectKvDecodesLikeColocatedGeneration) {
  TearDownServer();
  StartServer(/*max_batch=*/2, /*lease_ttl_ms=*/30000, "tcp", /*staged=*/true, /*direct=*/true);
  ASSERT_TRUE(server_->regions().direct());
  const auto prompt = Prompt("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22");
  const v1::SamplingParams p = Greedy(16);
  const GenerationResult want = Colocated(prompt, p);
  const StreamResult got = Disaggregated("direct", prompt, p);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.tokens, want.tokens);
}

TEST_F(DecodeWorkerTest, NcclOnACpuDecodeWorkerIsAClearStartUpError) {
  DecodeServerOptions so;
  so.transport = "nccl";
  auto server = DecodeServer::Start(*phase_, so);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition) << server.status();
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("keeps its KV on the CPU"));
}

}  // namespace
}  // namespace dq::decode::testing
