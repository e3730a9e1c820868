// Moves one tensor from a source file into a GgufWriter, either as its bytes (same type) or converted to
// another type through F32 (dequantize, then quantize), a chunk of rows at a time over the thread pool, so
// that memory stays at a few chunks whatever the tensor's size.
#pragma once

#include "base/thread_pool.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "surgery/progress.h"

namespace mtp::surgery {

// `imatrix`: per-column importance weights (ne[0] floats, or ne[0] * ne[2] for a 3-D tensor: one vector per
// expert matrix), nullptr for none.
Status stream_tensor(GgufWriter& writer, const GgufFile& source, const TensorInfo& tensor, GgmlType to,
                     ThreadPool& pool, const float* imatrix = nullptr, Progress* progress = nullptr);

}  // namespace mtp::surgery
