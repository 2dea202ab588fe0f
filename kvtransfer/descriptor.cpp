#include "kvtransfer/descriptor.h"

#include "common/status.h"
#include "kvtransfer/tcp_socket.h"

namespace dq::kvtransfer {
namespace {

constexpr std::string_view kMagic = "DQKV";
constexpr uint8_t kVersion = 2;  // 2: the region key

}  // namespace

std::string_view ByteReader::Bytes(size_t n) {
  if (!ok_ || n > remaining()) {
    ok_ = false;
    return {};
  }
  std::string_view out = in_.substr(pos_, n);
  pos_ += n;
  return out;
}

uint64_t ByteReader::Int(int width) {
  std::string_view b = Bytes(static_cast<size_t>(width));
  uint64_t v = 0;
  for (size_t i = 0; i < b.size(); ++i) v |= uint64_t{static_cast<uint8_t>(b[i])} << (8 * i);
  return v;
}

std::string EncodeDescriptor(const RegionDescriptor& descriptor) {
  ByteWriter w;
  w.Bytes(kMagic);
  w.U8(kVersion);
  w.Str(descriptor.kind);
  w.U64(descriptor.region_id);
  w.U64(descriptor.bytes);
  w.Bytes(std::string_view(reinterpret_cast<const char*>(descriptor.key.data()),
                           descriptor.key.size()));
  w.Str(descriptor.payload);
  return w.Take();
}

absl::StatusOr<RegionDescriptor> DecodeDescriptor(std::string_view encoded,
                                                  std::string_view expected_kind) {
  ByteReader r(encoded);
  if (r.Bytes(kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError(
        "not a kvtransfer region descriptor (bad magic); pass the bytes of "
        "RegionHandle::descriptor (KvRemoteRegion.region_descriptor) unchanged");
  }
  uint8_t version = r.U8();
  if (version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("region descriptor version ", version, " but this build reads version ",
                     kVersion, "; run the same dqserve version on prefill and decode workers"));
  }
  RegionDescriptor d;
  d.kind = std::string(r.Str());
  d.region_id = r.U64();
  d.bytes = r.U64();
  const std::string_view key = r.Bytes(d.key.size());
  std::copy(key.begin(), key.end(), d.key.begin());
  d.payload = std::string(r.Str());
  if (!r.ok() || r.remaining() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("region descriptor is truncated or has trailing bytes (", encoded.size(),
                     " bytes); pass RegionHandle::descriptor unchanged"));
  }
  if (d.kind != expected_kind) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region descriptor is for the '", d.kind, "' transport but this is the '",
        std::string(expected_kind), "' transport; both workers must use the same kvtransfer kind"));
  }
  return d;
}

std::string EncodeNcclPayload(const NcclPayload& payload) {
  ByteWriter w;
  w.Str(payload.control);
  w.U32(static_cast<uint32_t>(payload.cuda_device));
  return w.Take();
}

absl::StatusOr<NcclPayload> DecodeNcclPayload(std::string_view payload) {
  ByteReader r(payload);
  NcclPayload p;
  p.control = std::string(r.Str());
  p.cuda_device = static_cast<int32_t>(r.U32());
  if (!r.ok() || r.remaining() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl region descriptor payload is truncated or has trailing bytes (",
                     payload.size(), " bytes); pass RegionHandle::descriptor unchanged"));
  }
  if (p.cuda_device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl region descriptor names CUDA device ", p.cuda_device));
  }
  DQ_RETURN_IF_ERROR(ParseHostPort(p.control).status());
  return p;
}

}  // namespace dq::kvtransfer
