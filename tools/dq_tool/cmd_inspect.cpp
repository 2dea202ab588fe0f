// dq-tool inspect: a checkpoint's format, metadata and tensor table, as text or JSON.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>

#include "engine/checkpoint/gguf_file.h"
#include "engine/checkpoint/open_checkpoint.h"
#include "engine/checkpoint/safetensors_checkpoint.h"
#include "tools/dq_tool/commands.h"

namespace dq::tool {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// Arrays longer than this (vocabularies, merges) are summarized as "[N items]".
constexpr size_t kMaxArrayItems = 16;
// Longer strings (chat templates) are cut in text output.
constexpr size_t kMaxTextString = 120;

struct InspectOptions {
  std::string path;
  bool json = false;
};

std::string Summary(size_t n) { return absl::StrCat("[", n, " items]"); }

// A GGUF value as JSON; long arrays become the "[N items]" summary string.
json ValueToJson(const GgufValue& v) {
  return std::visit(
      [](const auto& x) -> json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, uint64_t> || std::is_same_v<T, int64_t> ||
                      std::is_same_v<T, double> || std::is_same_v<T, bool> ||
                      std::is_same_v<T, std::string>) {
          return json(x);
        } else {
          if (x.size() > kMaxArrayItems) return json(Summary(x.size()));
          return json(x);
        }
      },
      v);
}

// Escapes control characters so each metadata entry stays on one line.
std::string OneLine(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out += c;
    }
  }
  if (out.size() > kMaxTextString) {
    out = absl::StrCat(out.substr(0, kMaxTextString), "... (", s.size(), " chars)");
  }
  return out;
}

std::string ValueToText(const GgufValue& v) {
  if (auto* s = std::get_if<std::string>(&v)) return absl::StrCat("\"", OneLine(*s), "\"");
  if (auto* strs = std::get_if<std::vector<std::string>>(&v)) {
    if (strs->size() > kMaxArrayItems) return Summary(strs->size());
    std::string out = "[";
    for (size_t i = 0; i < strs->size(); ++i) {
      absl::StrAppend(&out, i ? ", " : "", "\"", OneLine((*strs)[i]), "\"");
    }
    return out + "]";
  }
  const json j = ValueToJson(v);
  if (!j.is_array()) {
    // Alternatives 5.. are arrays; a long one came back as its "[N items]" summary.
    if (v.index() >= 5) return j.get<std::string>();
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  std::string out = "[";
  for (size_t i = 0; i < j.size(); ++i) absl::StrAppend(&out, i ? ", " : "", j[i].dump());
  return out + "]";
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&out, i ? ", " : "", shape[i]);
  return out + "]";
}

// config.json next to the weights (the directory itself, or the file's directory), if any.
std::optional<nlohmann::json> ReadConfig(const std::string& path) {
  std::error_code ec;
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  std::ifstream in(dir / "config.json");
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

struct Totals {
  int64_t params = 0;
  int64_t bytes = 0;
};

Totals Sum(const Checkpoint& ck) {
  Totals t;
  for (const TensorView& v : ck.tensors()) {
    t.params += v.numel();
    t.bytes += v.nbytes;
  }
  return t;
}

json ToJson(const std::string& path, const Checkpoint& ck) {
  json out;
  out["path"] = path;
  out["format"] = std::string(ck.format());
  json metadata = json::object();
  if (auto* g = dynamic_cast<const GgufFile*>(&ck)) {
    out["version"] = g->version();
    for (const auto& [k, v] : g->metadata()) metadata[k] = ValueToJson(v);
  } else if (auto* s = dynamic_cast<const SafetensorsCheckpoint*>(&ck)) {
    for (const auto& [k, v] : s->file_metadata()) metadata[k] = v;
    if (auto cfg = ReadConfig(path)) out["config"] = json::parse(cfg->dump());
  }
  out["metadata"] = std::move(metadata);
  json tensors = json::array();
  for (const TensorView& t : ck.tensors()) {
    tensors.push_back({{"name", t.name},
                       {"dtype", std::string(DTypeName(t.dtype))},
                       {"shape", t.shape},
                       {"bytes", t.nbytes}});
  }
  out["tensors"] = std::move(tensors);
  const Totals totals = Sum(ck);
  out["totals"] = {
      {"tensors", ck.tensors().size()}, {"params", totals.params}, {"bytes", totals.bytes}};
  return out;
}

void PrintMetadata(const std::string& path, const Checkpoint& ck, std::ostream& os) {
  if (auto* g = dynamic_cast<const GgufFile*>(&ck)) {
    os << "format: gguf (version " << g->version() << ")\n";
    os << "metadata (" << g->metadata().size() << " keys):\n";
    for (const auto& [k, v] : g->metadata()) os << "  " << k << " = " << ValueToText(v) << "\n";
    return;
  }
  os << "format: " << ck.format() << "\n";
  if (auto* s = dynamic_cast<const SafetensorsCheckpoint*>(&ck)) {
    os << "files: " << s->file_paths().size() << "\n";
    os << "__metadata__ (" << s->file_metadata().size() << " keys):\n";
    for (const auto& [k, v] : s->file_metadata()) os << "  " << k << " = " << OneLine(v) << "\n";
    if (auto cfg = ReadConfig(path)) {
      os << "config.json:\n";
      std::istringstream lines(cfg->dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
      for (std::string line; std::getline(lines, line);) os << "  " << line << "\n";
    }
  }
}

void PrintTensors(const Checkpoint& ck, std::ostream& os) {
  size_t name_w = 4, shape_w = 5;
  for (const TensorView& t : ck.tensors()) {
    name_w = std::max(name_w, t.name.size());
    shape_w = std::max(shape_w, ShapeText(t.shape).size());
  }
  os << "tensors:\n";
  os << absl::StrFormat("  %-*s  %-5s  %-*s  %12s\n", name_w, "name", "dtype", shape_w, "shape",
                        "bytes");
  for (const TensorView& t : ck.tensors()) {
    os << absl::StrFormat("  %-*s  %-5s  %-*s  %12d\n", name_w, t.name,
                          std::string(DTypeName(t.dtype)), shape_w, ShapeText(t.shape), t.nbytes);
  }
  const Totals totals = Sum(ck);
  os << absl::StrFormat("totals: %d tensors, %d params, %d bytes (%.1f MiB)\n", ck.tensors().size(),
                        totals.params, totals.bytes, static_cast<double>(totals.bytes) / (1 << 20));
}

int RunInspect(const InspectOptions& opts) {
  auto ck = OpenCheckpoint(opts.path);
  if (!ck.ok()) {
    std::cerr << "error: " << ck.status().message() << "\n";
    return 1;
  }
  if (opts.json) {
    std::cout << ToJson(opts.path, **ck).dump(2, ' ', false, json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << "path: " << opts.path << "\n";
    PrintMetadata(opts.path, **ck, std::cout);
    PrintTensors(**ck, std::cout);
  }
  return 0;
}

}  // namespace

void RegisterInspect(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "print a checkpoint's format, metadata and tensor table (GGUF or safetensors)");
  cmd->add_option("path", opts->path, ".gguf file, .safetensors file or model directory")
      ->required();
  cmd->add_flag("--json", opts->json, "print one JSON object instead of text");
  cmd->callback([opts, exit_code] { *exit_code = RunInspect(*opts); });
}

}  // namespace dq::tool
