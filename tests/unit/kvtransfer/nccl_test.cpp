// The nccl backend's parts that need no GPU: its descriptor payload, handshake frame and copy
// planning, and what CreateTransport says where the backend cannot run. The transfers themselves
// are tested on two GPUs by tests/gpu/nccl_transport_test.cpp.
#include <gtest/gtest.h>

#include <cstring>

#include "kvtransfer/descriptor.h"
#include "kvtransfer/nccl_wire.h"
#include "kvtransfer/transport.h"

namespace dq::kvtransfer {

// For EXPECT_EQ on vectors of copies (ADL finds it here, next to CopyOp).
bool operator==(const CopyOp& a, const CopyOp& b) {
  return a.local_offset == b.local_offset && a.remote_offset == b.remote_offset &&
         a.bytes == b.bytes;
}

namespace {

TEST(NcclDescriptorTest, RoundTrips) {
  const std::string payload = EncodeNcclPayload({"10.0.0.7:41234", 3});
  const std::string encoded = EncodeDescriptor({"nccl", 77, uint64_t{5} << 30, payload});
  auto d = DecodeDescriptor(encoded, "nccl");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->region_id, 77u);
  EXPECT_EQ(d->bytes, uint64_t{5} << 30);
  auto p = DecodeNcclPayload(d->payload);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->control, "10.0.0.7:41234");
  EXPECT_EQ(p->cuda_device, 3);
  auto v6 = DecodeNcclPayload(EncodeNcclPayload({"[::1]:9", 0}));
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->control, "[::1]:9");
}

TEST(NcclDescriptorTest, RefusesOtherKindsAndMalformedPayloads) {
  const std::string payload = EncodeNcclPayload({"127.0.0.1:5000", 1});
  // A tcp descriptor handed to nccl, and the other way round.
  auto tcp = DecodeDescriptor(EncodeDescriptor({"tcp", 1, 64, "127.0.0.1:5000"}), "nccl");
  ASSERT_FALSE(tcp.ok());
  EXPECT_EQ(tcp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tcp.status().message().find("'tcp' transport"), std::string::npos) << tcp.status();
  EXPECT_FALSE(DecodeDescriptor(EncodeDescriptor({"nccl", 1, 64, payload}), "tcp").ok());
  // Truncated, trailing bytes, a bare tcp payload (no length prefix), a bad address.
  EXPECT_FALSE(DecodeNcclPayload(payload.substr(0, payload.size() - 1)).ok());
  EXPECT_FALSE(DecodeNcclPayload(payload + "x").ok());
  EXPECT_FALSE(DecodeNcclPayload("127.0.0.1:5000").ok());
  EXPECT_FALSE(DecodeNcclPayload("").ok());
  EXPECT_FALSE(DecodeNcclPayload(EncodeNcclPayload({"no-port", 0})).ok());
  EXPECT_FALSE(DecodeNcclPayload(EncodeNcclPayload({"host:0", 0})).ok());
  auto negative = DecodeNcclPayload(EncodeNcclPayload({"127.0.0.1:5000", -1}));
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclHelloTest, RoundTripsAndRefusesForeignFrames) {
  nccl::Hello hello;
  for (size_t i = 0; i < hello.unique_id.size(); ++i) hello.unique_id[i] = static_cast<char>(i * 7);
  hello.bus_id = "00000000:19:00.0";
  auto frame = nccl::EncodeHello(hello);
  auto back = nccl::DecodeHello(frame.data());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->unique_id, hello.unique_id);
  EXPECT_EQ(back->bus_id, hello.bus_id);
  // An overlong bus id is cut, never overflows the frame.
  hello.bus_id = std::string(100, 'b');
  back = nccl::DecodeHello(nccl::EncodeHello(hello).data());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->bus_id, std::string(nccl::kBusIdBytes - 1, 'b'));
  frame[0] ^= 1;
  EXPECT_EQ(nccl::DecodeHello(frame.data()).status().code(), absl::StatusCode::kInvalidArgument);
  frame[0] ^= 1;
  frame[4] = 9;  // version
  EXPECT_FALSE(nccl::DecodeHello(frame.data()).ok());
}

TEST(NcclPlanTest, MergesCopiesContiguousOnBothSidesOnly) {
  const std::vector<CopyOp> in = {
      {0, 100, 10}, {10, 110, 5},  // contiguous both sides: merged
      {15, 200, 5},                // local contiguous only: new op
      {40, 205, 5},                // remote contiguous only: new op
      {45, 210, 0},                // empty: dropped
      {45, 210, 7},                // follows {40, 205, 5}: merged
  };
  const std::vector<CopyOp> want = {{0, 100, 15}, {15, 200, 5}, {40, 205, 12}};
  EXPECT_EQ(nccl::MergeAdjacentCopies(in), want);
  EXPECT_TRUE(nccl::MergeAdjacentCopies({}).empty());
}

TEST(NcclPlanTest, ChunksCoverTheOpExactly) {
  std::vector<std::pair<uint64_t, uint64_t>> got;
  auto collect = [&](uint64_t off, uint64_t n) { got.emplace_back(off, n); };
  nccl::ForEachChunk(10, 4, collect);
  EXPECT_EQ(got, (std::vector<std::pair<uint64_t, uint64_t>>{{0, 4}, {4, 4}, {8, 2}}));
  got.clear();
  nccl::ForEachChunk(8, 4, collect);
  EXPECT_EQ(got, (std::vector<std::pair<uint64_t, uint64_t>>{{0, 4}, {4, 4}}));
  got.clear();
  nccl::ForEachChunk(0, 4, collect);
  EXPECT_TRUE(got.empty());
  got.clear();
  nccl::ForEachChunk(uint64_t{256} << 20, nccl::kNcclChunkBytes, collect);
  EXPECT_EQ(got.size(), 4u);
}

TEST(NcclFactoryTest, IsListedAndFailsClearlyWhereItCannotRun) {
  const auto kinds = TransportKinds();
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "nccl"), kinds.end());
  TransportConfig c;
  c.kind = "nccl";
  auto t = CreateTransport(c);
#ifndef DQ_HAVE_NCCL
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("built without CUDA/NCCL"), std::string::npos) << t.status();
#else
  // A CUDA build: works where a GPU is visible, else says that none is.
  if (!t.ok()) {
    EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
    EXPECT_NE(t.status().message().find("CUDA device"), std::string::npos) << t.status();
  } else {
    EXPECT_EQ((*t)->name(), "nccl");
    EXPECT_TRUE((*t)->supports_device_memory());
    // Host memory is not what it moves.
    std::vector<char> host(64);
    auto r = (*t)->RegisterRegion(host.data(), host.size());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
#endif
}

TEST(NcclFactoryTest, WildcardBindNeedsAnAdvertisedAddress) {
#ifdef DQ_HAVE_NCCL
  TransportConfig c;
  c.kind = "nccl";
  c.bind_address = "0.0.0.0";
  auto t = CreateTransport(c);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
#else
  GTEST_SKIP() << "the nccl backend exists only in CUDA builds";
#endif
}

}  // namespace
}  // namespace dq::kvtransfer
