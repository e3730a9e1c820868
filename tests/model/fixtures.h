// Synthetic qwen35moe files shared by the model tests: written once per test binary into a temporary folder.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "../gguf/test_util.h"
#include "gguf/gguf_file.h"
#include "model/model.h"
#include "surgery/synth.h"

namespace mtp::testing {

// The temporary folder and the tiny F32 models in it (with and without the MTP block).
struct Fixtures {
  TempDir dir;
  std::string tiny_mtp;     // tiny, F32, with MTP
  std::string tiny_q8_mtp;  // tiny, Q8_0, with MTP
  std::string tiny_no_mtp;  // tiny, F32, no MTP
};

inline const Fixtures& fixtures() {
  // Destroyed at exit, which removes the folder.
  static const std::unique_ptr<Fixtures> f = [] {
    auto out = std::make_unique<Fixtures>();
    ThreadPool pool(2);
    auto make = [&](const std::string& name, bool mtp, GgmlType type) {
      surgery::SynthOptions opt;
      opt.shape = "tiny";
      opt.mtp = mtp;
      opt.type = type;
      opt.seed = 7;
      const std::string path = out->dir.file(name);
      Status s = surgery::synth_model(opt, path, pool);
      if (!s.ok()) throw std::runtime_error(s.message());
      return path;
    };
    out->tiny_mtp = make("tiny_mtp.gguf", true, GgmlType::F32);
    out->tiny_q8_mtp = make("tiny_q8_mtp.gguf", true, GgmlType::Q8_0);
    out->tiny_no_mtp = make("tiny_no_mtp.gguf", false, GgmlType::F32);
    return out;
  }();
  return *f;
}

// Loads a model or throws (test set-up).
inline Model load(const std::string& path) {
  auto m = Model::load(path);
  if (!m.ok()) throw std::runtime_error(m.status().message());
  return std::move(*m);
}

// n pseudo-random token ids below `vocab` (an LCG: the same seed gives the same ids everywhere).
inline std::vector<int32_t> tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> t;
  uint32_t x = seed;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t.push_back(static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab)));
  }
  return t;
}

// Writes a copy of `src` to `dst` after `edit` has seen (and may change or drop, by returning false) every
// tensor's spec and bytes, and `edit_metadata` (when given) the key-value pairs.
inline void rewrite_gguf(const std::string& src, const std::string& dst,
                         const std::function<bool(TensorSpec&, std::vector<uint8_t>&)>& edit,
                         const std::function<void(Metadata&)>& edit_metadata = nullptr) {
  auto file = GgufFile::open(src);
  if (!file.ok()) throw std::runtime_error(file.status().message());
  std::vector<TensorSpec> specs;
  std::vector<std::vector<uint8_t>> data;
  for (const TensorInfo& info : file->tensors()) {
    TensorSpec spec{info.name, info.type, info.ne};
    auto bytes = file->tensor_data(info);
    std::vector<uint8_t> copy(bytes.begin(), bytes.end());
    if (!edit(spec, copy)) continue;
    specs.push_back(spec);
    data.push_back(std::move(copy));
  }
  Metadata md = file->metadata();
  if (edit_metadata) edit_metadata(md);
  write_gguf(dst, md, specs, data);
}

}  // namespace mtp::testing
