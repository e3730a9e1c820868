// `mtp inspect FILE`: a summary of a GGUF file a person reads at a glance (the seed report's structural
// comparison), `--tensors` for every tensor, `--metadata` for every key, `--json` for machines.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "surgery/inspect_report.h"

namespace mtp::tools {
using namespace mtp::surgery;  // this command is a front end of the surgery library
namespace {

struct InspectOptions {
  std::vector<std::string> paths;  // one file, or two to compare
  bool tensors = false;
  bool metadata = false;
  bool json = false;
};

// Decimal units, as the seed report sizes files ("19.6 GB decimal").
std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n >= 1000000000ull)
    std::snprintf(buf, sizeof(buf), "%.2f GB", n / 1e9);
  else if (n >= 1000000ull)
    std::snprintf(buf, sizeof(buf), "%.2f MB", n / 1e6);
  else if (n >= 1000ull)
    std::snprintf(buf, sizeof(buf), "%.2f kB", n / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(n));
  return buf;
}

std::string or_dash(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : "-";
}

std::string file_type_string(const std::optional<uint32_t>& ft) {
  if (!ft) return "-";
  std::string_view name = file_type_name(*ft);
  return str_cat(*ft, " (", name.empty() ? "unknown" : name, ")");
}

// The summary as (key, value) rows; a key may be empty for a continuation line. `mtp inspect A B` lines the
// rows of two files up by key.
std::vector<std::pair<std::string, std::string>> summary_rows(const InspectReport& r) {
  std::vector<std::pair<std::string, std::string>> rows;
  auto row = [&](std::string key, std::string value) { rows.emplace_back(std::move(key), std::move(value)); };
  row("file", r.path);
  row("size", str_cat(human_bytes(r.file_size), " (", r.file_size, " bytes)"));
  row("gguf", str_cat("v", r.version, ", ", r.n_tensors, " tensors, ", r.n_kv, " metadata keys, alignment ",
                      r.alignment));
  row("architecture", r.architecture.empty() ? "-" : r.architecture);
  if (!r.name.empty()) row("name", r.name);
  row("block_count", or_dash(r.block_count));
  row("trunk layers", or_dash(r.trunk_layers));
  row("nextn_predict_layers", or_dash(r.nextn_predict_layers));
  if (r.mtp_block) {
    std::string nextn;
    for (const auto& n : r.nextn_tensors) nextn += (nextn.empty() ? "" : ", ") + n;
    row("MTP block", str_cat("present: blk.", *r.mtp_block, " (", r.mtp_tensors.size(),
                             " tensors; nextn: ", nextn.empty() ? "none" : nextn, ")"));
  } else {
    row("MTP block", "absent");
  }
  if (r.head_only) row("head-only file", "yes (mtp extract-head): use it with `mtp graft --head`");
  row("file_type", file_type_string(r.file_type));
  if (r.quantization_version) row("quantization_version", std::to_string(*r.quantization_version));
  if (!r.tokenizer_model.empty() || r.n_tokens) {
    row("tokenizer", str_cat(r.tokenizer_model.empty() ? "-" : r.tokenizer_model,
                             r.tokenizer_pre.empty() ? "" : " (pre " + r.tokenizer_pre + ")", ", ",
                             r.n_tokens.value_or(0), " tokens, ", r.n_merges.value_or(0), " merges"));
  }
  for (const auto& [name, usage] : r.types) {
    row("tensor types " + name,
        str_cat(usage.count, usage.count == 1 ? " tensor, " : " tensors, ", human_bytes(usage.bytes)));
  }
  row("runs in mtp.cpp", r.runnable ? "yes" : "no: " + r.not_runnable);
  row("size: body", human_bytes(r.sizes.body));
  row("size: MTP block", human_bytes(r.sizes.mtp));
  row("size: embeddings+output", human_bytes(r.sizes.embeddings_output));
  row("size: index, padding", str_cat(human_bytes(r.sizes.index), ", ", human_bytes(r.sizes.padding)));
  for (const auto& w : r.warnings) row("warning", w);
  return rows;
}

void print_text(const InspectReport& r, const GgufFile& file, const InspectOptions& opt) {
  for (const auto& [key, value] : summary_rows(r)) std::printf("%-24s %s\n", key.c_str(), value.c_str());

  if (opt.metadata) {
    std::printf("\nmetadata:\n");
    for (const KeyValue& kv : file.metadata().entries()) {
      std::string type(value_type_name(kv.value.type()));
      if (kv.value.is_array()) type = str_cat(value_type_name(kv.value.elem_type()), "[]");
      std::printf("  %-48s %-9s %s\n", kv.key.c_str(), type.c_str(), kv.value.to_display().c_str());
    }
  }
  if (opt.tensors) {
    std::printf("\ntensors:\n  %-44s %-8s %-22s %12s\n", "name", "type", "shape", "bytes");
    for (const TensorInfo& t : file.tensors()) {
      std::printf("  %-44s %-8s %-22s %12llu\n", t.name.c_str(), std::string(type_name(t.type)).c_str(),
                  t.shape_string().c_str(), static_cast<unsigned long long>(t.n_bytes));
    }
  }
}

nlohmann::json value_json(const Value& v) {
  using nlohmann::json;
  switch (v.type()) {
    case ValueType::String:
      return *v.get_string();
    case ValueType::Bool:
      return *v.get<bool>();
    case ValueType::F32:
      return *v.get<float>();
    case ValueType::F64:
      return *v.get<double>();
    case ValueType::U64:
      return *v.get<uint64_t>();
    case ValueType::Array: {
      json a = json::array();
      for (uint64_t i = 0; i < v.size(); ++i) {
        switch (v.elem_type()) {
          case ValueType::String:
            a.push_back(v.strings()[i]);
            break;
          case ValueType::Array:
            a.push_back(value_json(v.arrays()[i]));
            break;
          case ValueType::Bool:
            a.push_back(v.raw()[i] != 0);
            break;
          case ValueType::F32:
            a.push_back(v.element<float>(i));
            break;
          case ValueType::F64:
            a.push_back(v.element<double>(i));
            break;
          case ValueType::U64:
            a.push_back(v.element<uint64_t>(i));
            break;
          default:
            a.push_back(*v.integer_element(i));
        }
      }
      return a;
    }
    default:
      return *v.get_integer();
  }
}

nlohmann::json report_json(const InspectReport& r, const GgufFile& file, const InspectOptions& opt) {
  using nlohmann::json;
  auto opt_json = [](const auto& o) { return o ? json(*o) : json(nullptr); };
  json j;
  j["file"] = r.path;
  j["file_size"] = r.file_size;
  j["gguf_version"] = r.version;
  j["alignment"] = r.alignment;
  j["n_kv"] = r.n_kv;
  j["n_tensors"] = r.n_tensors;
  j["canonical_layout"] = r.canonical_layout;
  j["architecture"] = r.architecture;
  j["name"] = r.name;
  j["block_count"] = opt_json(r.block_count);
  j["trunk_layers"] = opt_json(r.trunk_layers);
  j["nextn_predict_layers"] = opt_json(r.nextn_predict_layers);
  j["mtp"] = {{"present", r.mtp_block.has_value()},
              {"block", opt_json(r.mtp_block)},
              {"tensors", r.mtp_tensors},
              {"nextn", r.nextn_tensors}};
  j["head_only"] = r.head_only;
  j["file_type"] = opt_json(r.file_type);
  j["file_type_name"] = r.file_type ? json(std::string(file_type_name(*r.file_type))) : json(nullptr);
  j["quantization_version"] = opt_json(r.quantization_version);
  j["tokenizer"] = {{"model", r.tokenizer_model},
                    {"pre", r.tokenizer_pre},
                    {"n_tokens", opt_json(r.n_tokens)},
                    {"n_merges", opt_json(r.n_merges)}};
  json types = json::object();
  for (const auto& [name, u] : r.types) types[name] = {{"count", u.count}, {"bytes", u.bytes}};
  j["tensor_types"] = types;
  j["runnable"] = r.runnable;
  if (!r.runnable) j["not_runnable"] = r.not_runnable;
  j["sizes"] = {{"body", r.sizes.body},
                {"mtp", r.sizes.mtp},
                {"embeddings_output", r.sizes.embeddings_output},
                {"index", r.sizes.index},
                {"padding", r.sizes.padding}};
  j["warnings"] = r.warnings;
  if (opt.metadata) {
    json kvs = json::array();
    for (const KeyValue& kv : file.metadata().entries()) {
      kvs.push_back(
          {{"key", kv.key},
           {"type", value_type_name(kv.value.type())},
           {"elem_type", kv.value.is_array() ? json(value_type_name(kv.value.elem_type())) : json(nullptr)},
           {"value", value_json(kv.value)}});
    }
    j["metadata"] = kvs;
  }
  if (opt.tensors) {
    json ts = json::array();
    for (const TensorInfo& t : file.tensors()) {
      std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + effective_n_dims(t.ne));
      ts.push_back({{"name", t.name},
                    {"type", type_name(t.type)},
                    {"shape", shape},
                    {"bytes", t.n_bytes},
                    {"offset", file.data_offset() + t.offset}});
    }
    j["tensors"] = ts;
  }
  return j;
}

void print_json(const nlohmann::json& j) {
  // Invalid UTF-8 in a hostile file's strings is replaced rather than thrown on.
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

// Two files side by side, rows lined up by key (the seed report's structural comparison).
void print_comparison(const InspectReport& a, const InspectReport& b) {
  auto ra = summary_rows(a), rb = summary_rows(b);
  std::vector<std::string> keys;
  for (const auto* rows : {&ra, &rb}) {
    for (const auto& [key, value] : *rows) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
  }
  auto lookup = [](const auto& rows, const std::string& key) {
    std::string out;
    for (const auto& [k, v] : rows) {
      if (k == key) out += (out.empty() ? "" : "; ") + v;
    }
    return out.empty() ? std::string("-") : out;
  };
  size_t width = 4;
  for (const auto& k : keys) width = std::max(width, std::min<size_t>(56, lookup(ra, k).size()));
  std::printf("%-24s | %-*s | %s\n", "", static_cast<int>(width), "A", "B");
  for (const auto& k : keys) {
    const std::string va = lookup(ra, k), vb = lookup(rb, k);
    std::printf("%-24s | %-*s | %s%s\n", k.c_str(), static_cast<int>(width), va.c_str(), vb.c_str(),
                va == vb || k == "file" ? "" : "   <");
  }
}

}  // namespace

CommandRunner register_inspect(CLI::App& app) {
  auto opt = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Summarize a GGUF file (or compare two): architecture, MTP block, types, sizes");
  cmd->add_option("files", opt->paths, "A GGUF file, or two to compare side by side")
      ->required()
      ->expected(1, 2);
  cmd->add_flag("--tensors", opt->tensors, "List every tensor: name, type, shape, bytes");
  cmd->add_flag("--metadata", opt->metadata, "List every metadata key with its type and value");
  cmd->add_flag("--json", opt->json, "Print JSON instead of text");
  return [opt] {
    // The side-by-side comparison has no per-tensor or per-key lists (JSON has them for each file).
    if (opt->paths.size() == 2 && !opt->json && (opt->tensors || opt->metadata))
      return report_error("inspect", invalid_argument("--tensors/--metadata with two files need --json"));
    std::vector<GgufFile> files;
    std::vector<InspectReport> reports;
    for (const std::string& path : opt->paths) {
      auto file = GgufFile::open(path);
      if (!file.ok()) return report_error("inspect", file.status());
      reports.push_back(build_inspect_report(*file));
      files.push_back(std::move(file).value());
    }
    if (opt->json) {
      if (files.size() == 1) {
        print_json(report_json(reports[0], files[0], *opt));
      } else {
        print_json(
            {{"files", {report_json(reports[0], files[0], *opt), report_json(reports[1], files[1], *opt)}}});
      }
    } else if (files.size() == 1) {
      print_text(reports[0], files[0], *opt);
    } else {
      print_comparison(reports[0], reports[1]);
    }
    return kExitOk;
  };
}

}  // namespace mtp::tools
