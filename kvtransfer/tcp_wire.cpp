#include "kvtransfer/tcp_wire.h"

#include <algorithm>
#include <string_view>

#include "common/status.h"
#include "kvtransfer/descriptor.h"

namespace dq::kvtransfer::wire {
namespace {

template <size_t N>
std::array<char, N> ToArray(const ByteWriter& w) {
  std::array<char, N> out{};
  std::copy_n(w.data().data(), std::min(N, w.data().size()), out.begin());
  return out;
}

}  // namespace

std::array<char, TransferHeader::kSize> Encode(const TransferHeader& h) {
  ByteWriter w;
  w.U32(kTransferMagic);
  w.U16(kVersion);
  w.U16(0);
  w.U64(h.transfer);
  w.U64(h.region);
  w.U32(h.num_ops);
  w.U32(0);
  w.Bytes(std::string_view(reinterpret_cast<const char*>(h.key.data()), h.key.size()));
  return ToArray<TransferHeader::kSize>(w);
}

std::array<char, OpHeader::kSize> Encode(const OpHeader& h) {
  ByteWriter w;
  w.U64(h.remote_offset);
  w.U64(h.bytes);
  return ToArray<OpHeader::kSize>(w);
}

std::array<char, AckHeader::kSize> Encode(const AckHeader& h) {
  ByteWriter w;
  w.U32(kAckMagic);
  w.U32(h.code);
  w.U64(h.transfer);
  w.U32(h.message_bytes);
  w.U32(0);
  return ToArray<AckHeader::kSize>(w);
}

absl::StatusOr<TransferHeader> DecodeTransferHeader(const char* data) {
  ByteReader r(std::string_view(data, TransferHeader::kSize));
  uint32_t magic = r.U32();
  uint16_t version = r.U16();
  r.U16();
  TransferHeader h;
  h.transfer = r.U64();
  h.region = r.U64();
  h.num_ops = r.U32();
  r.U32();
  const std::string_view key = r.Bytes(h.key.size());
  std::copy(key.begin(), key.end(), h.key.begin());
  if (magic != kTransferMagic || version != kVersion || h.num_ops > kMaxOps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "corrupt kvtransfer stream (magic ", magic, ", version ", version, ", ", h.num_ops,
        " ops); is the sender a dqserve tcp transport of the same version?"));
  }
  return h;
}

OpHeader DecodeOpHeader(const char* data) {
  ByteReader r(std::string_view(data, OpHeader::kSize));
  OpHeader h;
  h.remote_offset = r.U64();
  h.bytes = r.U64();
  return h;
}

absl::StatusOr<AckHeader> DecodeAckHeader(const char* data) {
  ByteReader r(std::string_view(data, AckHeader::kSize));
  uint32_t magic = r.U32();
  AckHeader h;
  h.code = r.U32();
  h.transfer = r.U64();
  h.message_bytes = r.U32();
  if (magic != kAckMagic || h.message_bytes > kMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "corrupt kvtransfer ack (magic ", magic, ", ", h.message_bytes,
        " message bytes); is the receiver a dqserve tcp transport of the same version?"));
  }
  return h;
}

}  // namespace dq::kvtransfer::wire
