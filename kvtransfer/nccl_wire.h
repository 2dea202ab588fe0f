// The nccl backend's control channel and copy planning, free of CUDA so that they are built and
// tested everywhere. NCCL is two-sided (every ncclSend needs a matching ncclRecv) while the
// Transport interface is one-sided, so the receiver runs a small TCP control listener:
//   handshake, once per (sender, receiver) pair, sender -> receiver:
//     Hello{magic "DQNH", version, ncclUniqueId, the sender GPU's PCI bus id}
//   receiver -> sender, once its side of the 2-rank communicator is up (or why it is not):
//     wire::AckHeader{transfer 0, status code} + error text
//   per transfer, sender -> receiver: wire::TransferHeader + num_ops x wire::OpHeader (no
//   payload: the bytes go through NCCL), and back, once the bytes are in the receiver's memory:
//     wire::AckHeader + error text (tcp_wire.h).
// Both sides cut every op into chunks of at most kNcclChunkBytes the same way, so each ncclSend
// meets an ncclRecv of the same count.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvtransfer/transport.h"

namespace dq::kvtransfer::nccl {

inline constexpr uint32_t kHelloMagic = 0x484e5144;  // "DQNH"
inline constexpr uint16_t kHelloVersion = 1;
inline constexpr size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
inline constexpr size_t kBusIdBytes = 32;
// Largest single ncclSend/ncclRecv; bounds the scratch a refused op is drained into.
inline constexpr uint64_t kNcclChunkBytes = uint64_t{64} << 20;

struct Hello {
  std::array<char, kUniqueIdBytes> unique_id{};
  std::string bus_id;  // the sender's GPU, "0000:19:00.0"; at most kBusIdBytes - 1 chars
  static constexpr size_t kSize = 8 + kUniqueIdBytes + kBusIdBytes;
};

std::array<char, Hello::kSize> EncodeHello(const Hello& hello);
// InvalidArgument when the magic or version is not ours.
absl::StatusOr<Hello> DecodeHello(const char* data);

// Copies with both sides contiguous merged into one (a -> b where a ends where b starts, locally
// and remotely), in order. Fewer, larger messages are what makes NCCL fast.
std::vector<CopyOp> MergeAdjacentCopies(std::span<const CopyOp> copies);

// Calls fn(offset, bytes) for each chunk of [0, total) of at most `max_chunk` bytes, in order.
void ForEachChunk(uint64_t total, uint64_t max_chunk,
                  const std::function<void(uint64_t offset, uint64_t bytes)>& fn);

}  // namespace dq::kvtransfer::nccl
