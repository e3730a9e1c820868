// Model fixtures for the tools tests: synthetic models in a temporary folder, and copies of a file with its
// metadata edited (for tripping compatibility checks).
#pragma once

#include <functional>
#include <string>

#include "../gguf/test_util.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "surgery/synth.h"

namespace mtp::testing {

inline std::string synth_file(const TempDir& dir, const std::string& name, const surgery::SynthOptions& opt) {
  ThreadPool pool(2);
  std::string path = dir.file(name);
  Status s = surgery::synth_model(opt, path, pool);
  if (!s.ok()) throw std::runtime_error("synth failed: " + s.message());
  return path;
}

inline surgery::SynthOptions synth_options(bool mtp, GgmlType type = GgmlType::F32, uint64_t seed = 1) {
  surgery::SynthOptions opt;
  opt.mtp = mtp;
  opt.type = type;
  opt.seed = seed;
  return opt;
}

// The tiny shape with one field changed, for compatibility tests.
inline surgery::SynthOptions tiny_variant(bool mtp, const std::function<void(Qwen35MoeConfig&)>& edit) {
  surgery::SynthOptions opt = synth_options(mtp);
  Qwen35MoeConfig c = *qwen35moe_shape("tiny");
  edit(c);
  opt.config = c;
  return opt;
}

// Writes a copy of `src` whose metadata went through `edit`; tensors are copied unchanged.
inline std::string with_metadata(const std::string& src, const std::string& dst,
                                 const std::function<void(Metadata&)>& edit) {
  auto f = GgufFile::open(src);
  if (!f.ok()) throw std::runtime_error(f.status().message());
  Metadata md = f->metadata();
  edit(md);
  std::vector<TensorSpec> specs;
  for (const TensorInfo& t : f->tensors()) specs.push_back({t.name, t.type, t.ne});
  auto w = GgufWriter::create(dst, md, specs);
  if (!w.ok()) throw std::runtime_error(w.status().message());
  for (const TensorInfo& t : f->tensors()) {
    Status s = w->write_tensor(f->tensor_data(t));
    if (!s.ok()) throw std::runtime_error(s.message());
  }
  Status s = w->finish();
  if (!s.ok()) throw std::runtime_error(s.message());
  return dst;
}

}  // namespace mtp::testing
