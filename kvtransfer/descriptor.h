// The region descriptor envelope every backend shares, and the little-endian byte codec used for
// it and for the tcp wire headers. Fixed-width little-endian so that descriptors and headers mean
// the same on every machine of a deployment.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kvtransfer/transport.h"

namespace dq::kvtransfer {

// Appends fixed-width little-endian integers and length-prefixed strings.
class ByteWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Int(v, 2); }
  void U32(uint32_t v) { Int(v, 4); }
  void U64(uint64_t v) { Int(v, 8); }
  void Bytes(std::string_view b) { out_.append(b.data(), b.size()); }
  // u32 length, then the bytes.
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    Bytes(s);
  }
  const std::string& data() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void Int(uint64_t v, int width) {
    for (int i = 0; i < width; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

// Reads what ByteWriter wrote. Reading past the end sets ok() false and yields zeros, so a caller
// checks once at the end instead of after every field.
class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}
  uint8_t U8() { return static_cast<uint8_t>(Int(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Int(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Int(4)); }
  uint64_t U64() { return Int(8); }
  std::string_view Bytes(size_t n);
  std::string_view Str() { return Bytes(U32()); }
  bool ok() const { return ok_; }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  uint64_t Int(int width);
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// What every backend's descriptor carries; `payload` is the backend's own part.
struct RegionDescriptor {
  std::string kind;  // backend name; Prepare refuses another backend's descriptor
  uint64_t region_id = 0;
  uint64_t bytes = 0;
  std::string payload;
  RegionKey key{};  // the region's write capability (transport.h)
};

// "DQKV" | u8 version (2) | str kind | u64 region_id | u64 bytes | 16 bytes key | str payload.
std::string EncodeDescriptor(const RegionDescriptor& descriptor);
// InvalidArgument when `encoded` is not a descriptor, or is one for another backend than
// `expected_kind`.
absl::StatusOr<RegionDescriptor> DecodeDescriptor(std::string_view encoded,
                                                  std::string_view expected_kind);

// The nccl backend's payload: where the receiver's control listener is (the sender connects
// there to set up the communicator and to announce each transfer) and which CUDA device holds
// the region (for error messages; indices depend on CUDA_VISIBLE_DEVICES, so never compared).
struct NcclPayload {
  std::string control;  // "host:port"
  int32_t cuda_device = 0;
};
// str control | u32 cuda_device.
std::string EncodeNcclPayload(const NcclPayload& payload);
// InvalidArgument for a truncated payload, trailing bytes, a bad host:port or a negative device.
absl::StatusOr<NcclPayload> DecodeNcclPayload(std::string_view payload);

}  // namespace dq::kvtransfer
