// The tcp backend's wire format (little-endian, fixed sizes). Per transfer, sender -> receiver:
//   TransferHeader, then num_ops x (OpHeader, op.bytes payload bytes)
// and receiver -> sender, once every payload byte of the transfer is in (or drained):
//   AckHeader, then message_bytes of UTF-8 error text (0 when OK).
// Payloads are written straight from / into registered memory: nothing is staged.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvtransfer/transport.h"

namespace dq::kvtransfer::wire {

inline constexpr uint32_t kTransferMagic = 0x544b5144;  // "DQKT"
inline constexpr uint32_t kAckMagic = 0x414b5144;       // "DQKA"
inline constexpr uint16_t kVersion = 2;                 // 2: the region key
// A sanity limit: more ops than this in one transfer means a corrupt stream, not a real batch.
inline constexpr uint32_t kMaxOps = 1u << 20;
inline constexpr uint32_t kMaxMessageBytes = 4096;

struct TransferHeader {
  uint64_t transfer = 0;  // sender's TransferId, echoed in the ack
  uint64_t region = 0;    // receiver's RegionId
  uint32_t num_ops = 0;
  RegionKey key{};  // the region's write capability, from its descriptor
  static constexpr size_t kSize = 48;
};

struct OpHeader {
  uint64_t remote_offset = 0;
  uint64_t bytes = 0;
  static constexpr size_t kSize = 16;
};

struct AckHeader {
  uint64_t transfer = 0;
  uint32_t code = 0;  // absl::StatusCode; 0 = OK
  uint32_t message_bytes = 0;
  static constexpr size_t kSize = 24;
};

std::array<char, TransferHeader::kSize> Encode(const TransferHeader& h);
std::array<char, OpHeader::kSize> Encode(const OpHeader& h);
std::array<char, AckHeader::kSize> Encode(const AckHeader& h);
// InvalidArgument (a corrupt or foreign stream) when magic, version or limits do not match.
absl::StatusOr<TransferHeader> DecodeTransferHeader(const char* data);
OpHeader DecodeOpHeader(const char* data);
absl::StatusOr<AckHeader> DecodeAckHeader(const char* data);

}  // namespace dq::kvtransfer::wire
