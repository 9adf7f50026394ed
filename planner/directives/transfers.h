// Transfers between device sets, derived from placement: wherever a compute
// task reads a tensor that a compute task on other devices writes, a send on
// the writer's device and a recv on the reader's carry it, replica i of the
// writer to replica i of the reader. Directives that move tasks (place,
// replicate) call route_transfers again, which drops the old transfers and
// derives them anew, so the data edge writer -> reader always stays in the
// DAG and the transfers hang beside it.
#pragma once

#include "planner/directives/directive.h"

namespace piper::planner {

// Also sends a parameter updated on some devices to the others that read it
// (tied weights), and delivers the loss of every microbatch to every device
// that does not compute it, so that every rank reports the step's loss.
// Throws piper::Error naming the directive when writer and reader have
// different numbers of replicas (neither of them one) or a tensor shared by
// microbatches crosses devices.
void route_transfers(ir::TaskGraph& graph, const DirectiveContext& context);

// Refuses a DAG where tasks exchanging data have different numbers of
// replicas, which route_transfers tolerates between directives, or where
// replica i of a writer would send to a device running another replica of
// it. Throws piper::Error naming `source` (the strategy file).
void check_replica_counts(const ir::TaskGraph& graph, const std::string& source);

// The stream of transfers from device `from` to device `to`, on both: one
// per direction and pair, with the same name on sender and receiver, so that
// communicators that pair channels by name and order (NCCL) match them.
std::string transfer_stream(int from, int to);

}  // namespace piper::planner
