// Scenarios every cross-process backend must pass, written once and run per backend: a sender
// (this process) copies random bytes into regions of a forked receiver, which checks them.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "kvtransfer/transport.h"
#include "tests/unit/kvtransfer/two_process.h"

namespace dq::kvtransfer::testing {

// Random source bytes and, per receiver region, the copies that fill it: the region's two halves
// come from two places in the source, swapped, at unaligned offsets.
struct CopyPlan {
  std::vector<uint64_t> sizes;
  std::vector<uint64_t> source_base;
  std::vector<std::byte> source;

  explicit CopyPlan(std::vector<uint64_t> region_sizes, uint32_t seed = 7)
      : sizes(std::move(region_sizes)) {
    uint64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      source_base.push_back(at + 7 * i);
      at += sizes[i] + 7 * i;
    }
    source.resize(at + 4096);
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i + 8 <= source.size(); i += 8) {
      uint64_t v = rng();
      std::memcpy(&source[i], &v, 8);
    }
  }

  std::vector<CopyOp> Copies(size_t i) const {
    uint64_t n = sizes[i], half = n / 2, base = source_base[i];
    return {{base + half, 0, n - half}, {base, n - half, half}};
  }

  // Regions registered later (index >= sizes.size()) are refills of region index % size.
  void Expected(int i, std::vector<std::byte>& out) const {
    for (const CopyOp& op : Copies(static_cast<size_t>(i) % sizes.size())) {
      std::memcpy(out.data() + op.remote_offset, source.data() + op.local_offset, op.bytes);
    }
  }

  ExpectedFn expected() const {
    return [this](int i, std::vector<std::byte>& out) { Expected(i, out); };
  }
};

// A sender transport with the plan's source registered, and a forked receiver.
struct TwoProcessSetup {
  std::unique_ptr<ReceiverProcess> receiver;
  std::unique_ptr<Transport> sender;
  RegionId source = 0;
  std::vector<RemoteRegionId> remotes;
  std::string error;  // why setup failed (then the test skips or fails with it)

  TwoProcessSetup(const TransportConfig& config, CopyPlan& plan) {
    // Fork before this process starts any transport: UCX (and threads) do not survive fork.
    receiver = ReceiverProcess::Start(config, plan.sizes, plan.expected(), &error);
    if (receiver == nullptr) return;
    auto t = CreateTransport(config);
    if (!t.ok()) {
      error = std::string(t.status().message());
      return;
    }
    sender = std::move(*t);
    auto handle = sender->RegisterRegion(plan.source.data(), plan.source.size());
    if (!handle.ok()) {
      error = std::string(handle.status().message());
      return;
    }
    source = handle->id;
    for (const std::string& d : receiver->descriptors()) {
      auto remote = sender->Prepare(d);
      if (!remote.ok()) {
        error = std::string(remote.status().message());
        return;
      }
      remotes.push_back(*remote);
    }
  }
  bool ok() const { return error.empty(); }
};

// Polls until the transfer ends; nullopt if it is still pending after timeout_ms. (Unlike
// WaitForTransfer, this keeps the transport's own DeadlineExceeded apart from "still pending".)
inline std::optional<absl::Status> WaitEnded(Transport& t, TransferId id, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    TransferStatus s = t.Poll(id);
    if (s.state != TransferState::kPending) return s.error;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::nullopt;
}

inline double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Moves every region of the plan (one transfer each, all in flight at once) and has the
// receiver compare bytes.
inline void MoveAllAndVerify(TwoProcessSetup& s, const CopyPlan& plan) {
  std::vector<TransferId> ids;
  for (size_t i = 0; i < plan.sizes.size(); ++i) {
    auto id = s.sender->Post(s.source, s.remotes[i], plan.Copies(i));
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  for (TransferId id : ids) ASSERT_TRUE(WaitForTransfer(*s.sender, id, 60000).ok());
  for (size_t i = 0; i < plan.sizes.size(); ++i) {
    EXPECT_EQ(s.receiver->Command("verify " + std::to_string(i)), "ok");
  }
}

inline void OutOfBoundsPostFails(TwoProcessSetup& s, const CopyPlan& plan) {
  uint64_t n = plan.sizes[0];
  CopyOp past_remote_end{0, n - 10, 20};
  auto bad = s.sender->Post(s.source, s.remotes[0], {&past_remote_end, 1});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kOutOfRange) << bad.status();
  CopyOp past_local_end{plan.source.size() - 1, 0, 2};
  bad = s.sender->Post(s.source, s.remotes[0], {&past_local_end, 1});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kOutOfRange) << bad.status();
  CopyOp overflowing{0, ~uint64_t{0} - 3, 8};  // offset + bytes wraps around 2^64
  bad = s.sender->Post(s.source, s.remotes[0], {&overflowing, 1});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kOutOfRange) << bad.status();
  // Nothing was sent, and the connection still works.
  MoveAllAndVerify(s, plan);
}

// The receiver is stopped (it cannot drain its socket or progress), a large transfer is posted,
// and the receiver is killed: the transfer must end within a few seconds, never hang, and a
// transfer posted after the death must fail too.
inline void PeerKilledMidTransfer(TwoProcessSetup& s, const CopyPlan& plan,
                                  bool must_fail_in_flight) {
  s.receiver->Stop();
  std::vector<CopyOp> whole = {{0, 0, plan.sizes.back()}};
  auto id = s.sender->Post(s.source, s.remotes.back(), whole);
  ASSERT_TRUE(id.ok()) << id.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto killed_at = std::chrono::steady_clock::now();
  s.receiver->Kill();
  std::optional<absl::Status> in_flight = WaitEnded(*s.sender, *id, 8000);
  ASSERT_TRUE(in_flight.has_value()) << "still pending 8 s after the receiver died";
  if (must_fail_in_flight) {
    EXPECT_FALSE(in_flight->ok());
  }
  std::printf("[ info ] in-flight transfer ended %.2f s after the kill: %s\n", Seconds(killed_at),
              in_flight->ToString().c_str());
  auto after = s.sender->Post(s.source, s.remotes[0], plan.Copies(0));
  if (after.ok()) {
    std::optional<absl::Status> late = WaitEnded(*s.sender, *after, 8000);
    ASSERT_TRUE(late.has_value()) << "a transfer posted after the receiver died still pends";
    EXPECT_FALSE(late->ok());
  }
  EXPECT_LT(Seconds(killed_at), 12.0);
}

}  // namespace dq::kvtransfer::testing
