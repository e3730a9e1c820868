// The batched forward pass over the trunk and the MTP block (docs/architecture.md section 3; the math of
// docs/model.md sections 3-4, checked against reference_forward.h).
//
// Per layer, each projection runs once over all rows of the batch (kernels::matmul, weights read once per
// batch); attention reads each row's own sequence's KV; the Gated DeltaNet recurrence runs per sequence row
// by row in place, streaming the states that rollback may return to into planes of their own (memory.h);
// MoE routes every
// row, groups rows by expert, runs each selected expert once over its rows, and adds each row's expert
// outputs back in the order of that row's top-k list. Every reduction has a fixed order per row, so a row's
// results are bitwise the same whatever else is in the batch and however the batch was split (batch
// invariance).
#pragma once

#include <span>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/batch.h"
#include "model/memory.h"
#include "model/model.h"

namespace mtp {

// The trunk over `batch`: every row's post-norm hidden (h_final) into out.hidden and the logits of the rows
// that ask. Each sequence's rows must continue it: consecutive positions starting at memory.seq_pos(seq).
// Fails, changing nothing, on a bad row or when the KV pool or the context is full.
Status forward(const Model& model, const Batch& batch, Memory& memory, Outputs& out, ThreadPool& pool);

// The trunk's LM head alone over post-norm hiddens (hidden.size() / n_embd rows, as out.hidden of forward()
// gives them): out.logits of every row, bitwise what forward() computes for a row with that hidden (the
// prefix cache keeps a checkpoint's last hidden instead of recomputing its row). out.hidden gets the input.
Status forward_logits(const Model& model, std::span<const float> hidden, Memory& memory, Outputs& out,
                      ThreadPool& pool);

// The MTP head over `batch` (rows with h_prev, Batch::add_mtp): each row as reference mtp_draft_logits, its
// KV row written at its position (llama.cpp's convention) after dropping the sequence's MTP rows at >= the
// first row's position. out.hidden gets h_mtp; logits for the rows that ask. Needs a model with an MTP block.
Status forward_mtp(const Model& model, const Batch& batch, Memory& memory, Outputs& out, ThreadPool& pool);

}  // namespace mtp
