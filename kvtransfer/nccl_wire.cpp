#include "kvtransfer/nccl_wire.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kvtransfer/descriptor.h"

namespace dq::kvtransfer::nccl {

std::array<char, Hello::kSize> EncodeHello(const Hello& hello) {
  ByteWriter w;
  w.U32(kHelloMagic);
  w.U16(kHelloVersion);
  w.U16(0);
  w.Bytes(std::string_view(hello.unique_id.data(), hello.unique_id.size()));
  std::array<char, kBusIdBytes> bus{};
  std::memcpy(bus.data(), hello.bus_id.data(), std::min(hello.bus_id.size(), kBusIdBytes - 1));
  w.Bytes(std::string_view(bus.data(), bus.size()));
  std::array<char, Hello::kSize> out{};
  std::memcpy(out.data(), w.data().data(), out.size());
  return out;
}

absl::StatusOr<Hello> DecodeHello(const char* data) {
  ByteReader r(std::string_view(data, Hello::kSize));
  const uint32_t magic = r.U32();
  const uint16_t version = r.U16();
  r.U16();
  if (magic != kHelloMagic || version != kHelloVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a dqserve nccl handshake (magic ", magic, ", version ", version,
                     "); is the peer a dqserve nccl transport of the same version?"));
  }
  Hello hello;
  std::string_view id = r.Bytes(kUniqueIdBytes);
  std::memcpy(hello.unique_id.data(), id.data(), id.size());
  std::string_view bus = r.Bytes(kBusIdBytes);
  hello.bus_id = std::string(bus.substr(0, std::min(bus.find('\0'), bus.size())));
  return hello;
}

std::vector<CopyOp> MergeAdjacentCopies(std::span<const CopyOp> copies) {
  std::vector<CopyOp> out;
  for (const CopyOp& c : copies) {
    if (c.bytes == 0) continue;
    if (!out.empty()) {
      CopyOp& prev = out.back();
      if (prev.local_offset + prev.bytes == c.local_offset &&
          prev.remote_offset + prev.bytes == c.remote_offset) {
        prev.bytes += c.bytes;
        continue;
      }
    }
    out.push_back(c);
  }
  return out;
}

void ForEachChunk(uint64_t total, uint64_t max_chunk,
                  const std::function<void(uint64_t offset, uint64_t bytes)>& fn) {
  for (uint64_t at = 0; at < total;) {
    const uint64_t n = std::min(total - at, max_chunk);
    fn(at, n);
    at += n;
  }
}

}  // namespace dq::kvtransfer::nccl
