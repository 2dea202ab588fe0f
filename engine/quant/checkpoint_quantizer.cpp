#include "engine/quant/checkpoint_quantizer.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "engine/checkpoint/safetensors_checkpoint.h"
#include "engine/model/architecture.h"
#include "engine/model/hf_export.h"
#include "engine/model/hf_from_gguf.h"
#include "engine/model/model_runner.h"
#include "engine/model/tensor_names.h"
#include "engine/quant/ggml_blocks.h"
#include "engine/quant/weight_codec.h"

namespace dq {
namespace {

namespace fs = std::filesystem;

// Input amax per (layer, which input), from a calibration pass.
using ActAmax = std::map<std::pair<int, LinearInput>, float>;

struct Job {
  const Model& src;
  const QuantizeCheckpointOptions& opt;
  const WeightCodec* codec = nullptr;  // null: plain bf16/f32 linear layers
  TensorNames src_names;
  TensorNames out_names{false};
  std::deque<std::vector<uint8_t>> bytes;  // owns everything `entries` points to
  std::vector<SafetensorsEntry> entries;
  std::set<std::string> consumed;
  ActAmax act_amax;
  // The group size the codec wrote (nvfp4: always 16, fp8: 0, intN: the effective group), which
  // config.json records: options.group_size is only a request, which fixed-block schemes ignore.
  int group_size = 0;
  // A GGUF source's conversion to HF's conventions (Gemma 3, Qwen3.5); null: values as stored.
  const HfFromGguf* from_gguf = nullptr;
};

absl::StatusOr<std::vector<float>> ReadF32(Job& job, const std::string& name) {
  const TensorView* t = job.src.checkpoint->Find(name);
  if (t == nullptr) return absl::NotFoundError("source checkpoint has no tensor '" + name + "'");
  job.consumed.insert(name);
  std::vector<float> v(t->numel());
  const int64_t cols = t->cols();
  for (int64_t r = 0; r < t->rows(); ++r) {
    DequantizeRow(t->dtype, t->data + r * DTypeRowBytes(t->dtype, cols), &v[r * cols], cols);
  }
  return v;
}

// A linear layer's fp32 [out, in] values: the stored matrix itself when it is a plain one, else
// the bound weight's scheme components (a quantized source being dequantized; fp8 keeps its
// values in "<module>.weight" beside the scales), all marked consumed.
std::vector<float> ReadLinear(Job& job, const std::string& name, const LinearWeight& w) {
  if (w.codec == nullptr && job.src.checkpoint->Find(name) != nullptr) return *ReadF32(job, name);
  const std::string lead = name.substr(0, name.size() - std::string("weight").size());
  for (const TensorView& t : job.src.checkpoint->tensors()) {
    if (t.name.rfind(lead, 0) == 0 && t.name.find('.', lead.size()) == std::string::npos) {
      job.consumed.insert(t.name);
    }
  }
  std::vector<float> v(w.out_features * w.in_features);
  for (int64_t r = 0; r < w.out_features; ++r) DequantizeLinearRow(w, r, &v[r * w.in_features]);
  return v;
}

void AddPlain(Job& job, const std::string& name, DType dtype, std::vector<int64_t> shape,
              const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * DTypeBlockBytes(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(&b[i * 4], &v[i], 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? F32ToBF16(v[i]) : F32ToF16(v[i]);
      std::memcpy(&b[i * 2], &h, 2);
    }
  }
  job.bytes.push_back(std::move(b));
  job.entries.push_back({name, dtype, std::move(shape), job.bytes.back().data()});
}

void AddQuantized(Job& job, const std::string& prefix, QuantizedTensors& q, float act_amax) {
  for (auto& [suffix, part] : q.view.parts) {
    job.bytes.emplace_back(part.data, part.data + part.nbytes);
    job.entries.push_back({prefix + "." + suffix, part.dtype, part.shape, job.bytes.back().data()});
  }
  if (act_amax > 0.0f) {
    // compressed-tensors' convention and arithmetic: input_global_scale = (1 / amax) * 6 * 448.
    AddPlain(job, prefix + ".input_global_scale", DType::kF32, {1}, {(1.0f / act_amax) * 2688.0f});
  }
}

float Amax(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

// Whether the linears reading `input` share one NVFP4 global scale (they read one activation).
bool SharesGlobalScale(LinearInput input) {
  return input == LinearInput::kQkv || input == LinearInput::kGateUp ||
         input == LinearInput::kGdnIn;
}

// One layer of the program, tensor by tensor as its blocks declare them (model_program.h's slot
// tables): vectors (norms, a GDN's conv, dt_bias and A_log) are copied as stored (values exact in
// f32, the stored shape and convention kept: zero-centred norms stay zero-centred), linears are
// quantized. NVFP4: the linears that read one input (q/k/v, gate/up, a GDN's four input
// projections) share one global scale.
absl::Status QuantizeLayer(Job& job, int layer, const ProgramLayer& program_layer) {
  struct Pending {
    std::string role;
    LinearInput input;
    std::vector<float> w;
    std::vector<int64_t> shape;
  };
  std::vector<Pending> linears;
  std::map<LinearInput, float> shared_amax;
  absl::Status status;
  for (const Block& block : program_layer.blocks) {
    ForEachBlockTensor(
        block,
        [&](const char* role, LinearInput input, const LinearWeight& bound) {
          std::vector<float> w = ReadLinear(job, job.src_names.Layer(layer, role), bound);
          if (job.from_gguf != nullptr && job.from_gguf->linear != nullptr) {
            job.from_gguf->linear(job.src.config, role, w, bound.out_features, bound.in_features);
          }
          float& amax = shared_amax[input];
          amax = std::max(amax, Amax(w));
          linears.push_back({role, input, std::move(w), {bound.out_features, bound.in_features}});
        },
        [&](const char* role, bool bare, const std::vector<float>&) {
          if (!status.ok()) return;
          const auto name = [&](const TensorNames& n) {
            return bare ? n.LayerBare(layer, role) : n.Layer(layer, role);
          };
          auto v = ReadF32(job, name(job.src_names));
          if (!v.ok()) {
            status = v.status();
            return;
          }
          std::vector<int64_t> shape = job.src.checkpoint->Find(name(job.src_names))->shape;
          if (job.from_gguf != nullptr) {
            status = job.from_gguf->vector(job.src.config, role, *v, shape);
            if (!status.ok()) return;
          }
          AddPlain(job, name(job.out_names), DType::kF32, std::move(shape), *v);
        });
  }
  DQ_RETURN_IF_ERROR(status);
  for (Pending& l : linears) {
    const std::string prefix = job.out_names.Layer(layer, l.role.c_str());
    const std::string base = prefix.substr(0, prefix.size() - std::string(".weight").size());
    if (job.codec == nullptr) {
      AddPlain(job, prefix, job.opt.format == "f32" ? DType::kF32 : DType::kBF16, l.shape, l.w);
      continue;
    }
    QuantizeOptions qo;
    qo.group_size = job.opt.group_size;
    if (SharesGlobalScale(l.input)) qo.shared_amax = shared_amax[l.input];
    auto q = job.codec->Quantize(l.w.data(), l.shape[0], l.shape[1], qo);
    if (!q.ok())
      return absl::Status(q.status().code(), base + ": " + std::string(q.status().message()));
    job.group_size = q->view.group_size;
    auto it = job.act_amax.find({layer, l.input});
    AddQuantized(job, base, *q, it == job.act_amax.end() ? 0.0f : it->second);
  }
  return absl::OkStatus();
}

absl::Status Calibrate(Job& job) {
  std::ifstream f(job.opt.calib_file, std::ios::binary);
  if (!f) return absl::NotFoundError("cannot read calibration text " + job.opt.calib_file);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<int32_t> ids = job.src.tokenizer.Encode(ss.str(), /*parse_special=*/false);
  if (ids.empty()) return absl::InvalidArgumentError("the calibration text has no tokens");
  if (static_cast<int>(ids.size()) > job.opt.calib_tokens) ids.resize(job.opt.calib_tokens);
  ModelRunnerOptions ro;
  ro.threads = job.opt.threads;
  ro.kv_capacity = static_cast<int>(ids.size()) + 16;
  DQ_ASSIGN_OR_RETURN(auto runner, ModelRunner::Create(*job.src.checkpoint, job.src.config, ro));
  DQ_RETURN_IF_ERROR(runner->SetPrefillObserver(
      [&](int layer, LinearInput which, const float* x, int64_t rows, int64_t n) {
        float& a = job.act_amax[{layer, which}];
        for (int64_t i = 0; i < rows * n; ++i) a = std::max(a, std::abs(x[i]));
      }));
  KvSequence seq;
  runner->kv_pool().extend(seq, static_cast<int>(ids.size()));
  BatchLogits logits;
  DQ_RETURN_IF_ERROR(runner->Forward(Batch{Phase::kPrefill, {{&seq, ids, false}}}, &logits));
  if (job.opt.progress) {
    std::fprintf(stderr, "dq-quantize: calibrated activation scales on %zu tokens\n", ids.size());
  }
  return absl::OkStatus();
}

absl::Status CheckAllConsumed(const Job& job) {
  for (const TensorView& t : job.src.checkpoint->tensors()) {
    if (job.consumed.count(t.name) == 0 && t.name != "rope_freqs.weight") {
      return absl::UnimplementedError(absl::StrCat(
          "source tensor '", t.name, "' is not part of the ", job.src.config.architecture,
          " graph dqserve knows; refusing to drop it silently"));
    }
  }
  return absl::OkStatus();
}

// The source's own config.json when it has one (every field of its architecture kept as written,
// e.g. Gemma's layer_types and RoPE bases), else one derived from the GGUF metadata.
absl::StatusOr<nlohmann::json> OutputConfigJson(const Job& job) {
  if (job.src_names.gguf()) return HfConfigJson(job.src.config);
  const fs::path path(job.src.path);
  const fs::path src = (fs::is_directory(path) ? path : path.parent_path()) / "config.json";
  std::ifstream f(src);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError(src.string() + " is not a JSON object");
  return j;
}

absl::Status WriteOutputs(Job& job, const std::string& out_dir) {
  fs::create_directories(out_dir);
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"producer", "dq-quantize"}};
  DQ_RETURN_IF_ERROR(
      WriteSafetensors((fs::path(out_dir) / "model.safetensors").string(), job.entries, meta));
  DQ_ASSIGN_OR_RETURN(nlohmann::json config, OutputConfigJson(job));
  config.erase("quantization_config");  // a dequantized source's
  if (job.codec != nullptr) {
    QuantConfig q;
    q.method = "dqserve";
    q.scheme = std::string(job.codec->scheme());
    q.group_size = job.group_size;
    config["quantization_config"] = q.ToJson();
  }
  std::ofstream(fs::path(out_dir) / "config.json") << config.dump(2) << "\n";
  return WriteTokenizerFiles(job.src.path, out_dir);
}

}  // namespace

absl::Status QuantizeCheckpoint(const Model& source, const std::string& out_dir,
                                const QuantizeCheckpointOptions& opt) {
  const bool plain = opt.format == "bf16" || opt.format == "f32";
  if (source.config.quant.quantized() && !plain) {
    return absl::InvalidArgumentError(
        absl::StrCat("the source checkpoint is already quantized (", source.config.quant.scheme,
                     "); quantize from the original bf16/f32 or GGUF model (--format f32 or bf16 "
                     "dequantizes it)"));
  }
  const bool gguf = source.checkpoint->format() == "gguf";
  DQ_ASSIGN_OR_RETURN(const Architecture* arch, RequireArchitecture(source.config.architecture));
  const HfFromGguf* from_gguf = gguf ? FindHfFromGguf(arch->name) : nullptr;
  if (gguf && !source.config.llama_layer() && from_gguf == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("dq-quantize reads GGUF files of the Llama/Qwen3 layer, Gemma 3 and Qwen3.5 "
                     "only; quantize this ",
                     std::string(arch->name), " model from its HF checkpoint"));
  }
  Job job{source, opt, nullptr, ArchitectureTensorNames(*arch, gguf)};
  job.out_names = ArchitectureTensorNames(*arch, false);
  job.from_gguf = from_gguf;
  if (opt.format != "bf16" && opt.format != "f32") {
    DQ_ASSIGN_OR_RETURN(job.codec, FindWeightCodec(opt.format));
  }
  if (!opt.calib_file.empty()) DQ_RETURN_IF_ERROR(Calibrate(job));
  const ModelConfig& c = source.config;
  DQ_ASSIGN_OR_RETURN(std::vector<float> emb, ReadF32(job, job.src_names.Embedding()));
  AddPlain(job, job.out_names.Embedding(), opt.embedding_dtype, {c.vocab_size, c.hidden_size}, emb);
  DQ_ASSIGN_OR_RETURN(std::vector<float> norm, ReadF32(job, job.src_names.FinalNorm()));
  if (job.from_gguf != nullptr) {
    std::vector<int64_t> shape = {c.hidden_size};
    DQ_RETURN_IF_ERROR(job.from_gguf->vector(c, "output_norm", norm, shape));
  }
  AddPlain(job, job.out_names.FinalNorm(), DType::kF32, {c.hidden_size}, norm);
  if (source.checkpoint->Find(job.src_names.LmHead()) != nullptr) {
    DQ_ASSIGN_OR_RETURN(std::vector<float> head, ReadF32(job, job.src_names.LmHead()));
    AddPlain(job, job.out_names.LmHead(), opt.embedding_dtype, {c.vocab_size, c.hidden_size}, head);
  }
  // What each layer holds is the architecture's program (its blocks' slot tables), bound from
  // the source as the engine would run it: the quantizer lists no tensor names of its own.
  DQ_ASSIGN_OR_RETURN(ModelProgram program, BindModelProgram(*source.checkpoint, c));
  for (int layer = 0; layer < static_cast<int>(program.layers.size()); ++layer) {
    if (opt.progress) {
      std::fprintf(stderr, "\rdq-quantize: layer %d/%zu (%s)", layer + 1, program.layers.size(),
                   opt.format.c_str());
    }
    DQ_RETURN_IF_ERROR(QuantizeLayer(job, layer, program.layers[layer]));
  }
  if (opt.progress) std::fprintf(stderr, "\n");
  DQ_RETURN_IF_ERROR(CheckAllConsumed(job));
  return WriteOutputs(job, out_dir);
}

}  // namespace dq
