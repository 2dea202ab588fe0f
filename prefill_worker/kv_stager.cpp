#include "prefill_worker/kv_stager.h"

#include <utility>

namespace dq::prefill {

std::vector<int32_t> ArenaBases(std::span<const KvStager::Span> spans) {
  std::vector<int32_t> bases;
  int32_t next = 0;
  for (const KvStager::Span& s : spans) {
    bases.push_back(next);
    next += s.last - s.first;
  }
  return bases;
}

std::vector<int32_t> SlotTable(const KvStager::Span& span, int32_t base) {
  std::vector<int32_t> table(span.last, -1);
  for (int i = span.first; i < span.last; ++i) table[i] = base + (i - span.first);
  return table;
}

std::vector<worker::KvCopy> CopyOutPlan(int layer, std::span<const KvStager::Span> spans,
                                        std::span<const int32_t> bases, const KvTensorLayout& cache,
                                        const KvTensorLayout& arena) {
  std::vector<worker::KvCopy> out;
  for (int tensor : {worker::kKeys, worker::kValues}) {
    const size_t tensor_start = out.size();
    for (size_t k = 0; k < spans.size(); ++k) {
      const KvStager::Span& s = spans[k];
      for (int i = s.first; i < s.last; ++i) {
        const worker::KvCopy c{
            tensor, tensor * arena.tensor_bytes() + arena.offset(layer, bases[k] + (i - s.first)),
            cache.offset(layer, s.cache_blocks[i]), cache.block_bytes};
        if (out.size() > tensor_start) {
          worker::KvCopy& prev = out.back();
          if (prev.host_offset + prev.bytes == c.host_offset &&
              prev.cache_offset + prev.bytes == c.cache_offset) {
            prev.bytes += c.bytes;
            continue;
          }
        }
        out.push_back(c);
      }
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<KvStager>> KvStager::Create(worker::KvStaging& staging,
                                                           int arena_blocks, bool need_arena) {
  std::unique_ptr<KvStager> s(new KvStager(staging));
  if (!staging.staged() || !need_arena) return s;
  if (arena_blocks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the KV staging arena needs at least one block (got ", arena_blocks, ")"));
  }
  const KvTensorLayout& cache = staging.geometry();
  s->arena_geometry_ = {cache.num_layers, arena_blocks, cache.block_size, cache.block_bytes};
  auto arena = staging.AllocateHost(2 * s->arena_geometry_.tensor_bytes());
  if (!arena.ok()) {
    return absl::Status(arena.status().code(),
                        absl::StrCat("the prefill KV staging arena (", arena_blocks,
                                     " blocks): ", arena.status().message()));
  }
  s->arena_ = std::move(*arena);
  return s;
}

KvStager::~KvStager() { staging_.Drain(); }

KvSourceMemory KvStager::host_source() const {
  const KvTensorLayout& cache = staging_.geometry();
  if (!staging_.staged()) {
    return {staging_.host_tensor(worker::kKeys), staging_.host_tensor(worker::kValues),
            cache.tensor_bytes(), cache};
  }
  if (!staged()) return {};
  const uint64_t bytes = arena_geometry_.tensor_bytes();
  return {arena_->data(), arena_->data() + bytes, bytes, arena_geometry_};
}

KvSourceMemory KvStager::device_source() const {
  const KvTensorLayout& cache = staging_.geometry();
  return {staging_.device_tensor(worker::kKeys), staging_.device_tensor(worker::kValues),
          cache.tensor_bytes(), cache};
}

void KvStager::Begin(std::vector<Span> spans) {
  shipped_.assign(staging_.geometry().num_layers, false);
  in_place_.clear();
  direct_.clear();
  spans_.clear();
  bases_.clear();
  slot_tables_.clear();
  for (Span& s : spans) {
    if (!staging_.staged()) {
      in_place_.push_back(s);
    } else if (s.writer != nullptr && s.writer->direct()) {
      direct_.push_back(s);
    } else {
      spans_.push_back(s);
    }
  }
  if (spans_.empty()) return;
  bases_ = ArenaBases(spans_);
  const int blocks = bases_.back() + spans_.back().last - spans_.back().first;
  if (blocks > max_blocks()) {
    // The batcher keeps iterations within the arena; never write past it (or into no arena).
    for (const Span& s : spans_) {
      s.writer->Fail(absl::InternalError(absl::StrCat(
          "an iteration of ", blocks, " KV blocks exceeds the staging arena's ", max_blocks())));
    }
    spans_.clear();
    bases_.clear();
    return;
  }
  for (size_t k = 0; k < spans_.size(); ++k) {
    slot_tables_.push_back(SlotTable(spans_[k], bases_[k]));
  }
}

void KvStager::LayerWritten(int layer) {
  if (layer < 0 || layer >= static_cast<int>(shipped_.size()) || shipped_[layer]) return;
  shipped_[layer] = true;
  for (const Span& s : in_place_) s.writer->PostLayer(layer, s.first, s.last, s.cache_blocks);
  if (!direct_.empty()) ShipDirect(layer);
  if (!spans_.empty()) ShipStaged(layer);
}

void KvStager::ShipDirect(int layer) {
  staging_.AfterWritten([this, layer](absl::Status s) {
    for (const Span& span : direct_) {
      if (!s.ok()) {
        span.writer->Fail(absl::Status(
            s.code(), absl::StrCat("waiting for layer ", layer, "'s KV: ", s.message())));
      } else {
        span.writer->PostLayer(layer, span.first, span.last, span.cache_blocks);
      }
    }
  });
}

void KvStager::ShipStaged(int layer) {
  std::vector<worker::KvCopy> copies =
      CopyOutPlan(layer, spans_, bases_, staging_.geometry(), arena_geometry_);
  staging_.CopyOut(std::move(copies), arena_->data(), [this, layer](absl::Status s) {
    for (size_t k = 0; k < spans_.size(); ++k) {
      const Span& span = spans_[k];
      if (!s.ok()) {
        span.writer->Fail(absl::Status(
            s.code(),
            absl::StrCat("copying layer ", layer, "'s KV out of the cache: ", s.message())));
      } else {
        span.writer->PostLayer(layer, span.first, span.last, slot_tables_[k]);
      }
    }
  });
}

void KvStager::End(bool forward_ok) {
  if (forward_ok) {
    for (int layer = 0; layer < static_cast<int>(shipped_.size()); ++layer) LayerWritten(layer);
  }
  staging_.Drain();
}

}  // namespace dq::prefill
