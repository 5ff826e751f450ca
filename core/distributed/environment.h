// The environment a rank process is started with, in torchrun's shape (ANVIL_ instead of
// the bare names), read and checked in one place:
//   ANVIL_RANK, ANVIL_WORLD_SIZE, ANVIL_LOCAL_RANK   this process's place in the job
//   ANVIL_SOCKET_IFNAME                              the interface the ranks reach each other on
//   ANVIL_SOCKET_FAMILY                              ipv4 (default) or ipv6
//   ANVIL_BACKEND                                    gloo (default, CPU tensors) or nccl (CUDA
//                                                    tensors on cuda:<local rank>)
//   ANVIL_RDZV_DIR                                   rendezvous through Gloo's file store in a
//                                                    directory every rank sees, or
//   ANVIL_MASTER_ADDR, ANVIL_MASTER_PORT             through a Redis server there (Gloo's
//                                                    RedisStore; anvil-run starts one), or
//   ANVIL_RDZV_URL                                   through a store of a registered scheme
//                                                    (register_rendezvous_store: anvild's ranks
//                                                    meet in its PostgreSQL job store)
//   ANVIL_JOB_ID, ANVIL_RESTART_ATTEMPT              the rendezvous prefix: a new attempt
//                                                    never meets a stale rank of an old one
//   ANVIL_COLLECTIVE_TIMEOUT_S                       per-collective timeout (default 300)
//   ANVIL_RENDEZVOUS_TIMEOUT_S                       how long ranks wait for each other at
//                                                    start (default: the collective timeout);
//                                                    longer lets a restarted host catch up
//
// The interface is never guessed: Gloo's default binds to the address the hostname resolves
// to, which on many hosts is 127.0.1.1 or an interface the other hosts cannot reach — the
// classic multi-host hang. A missing or unknown interface is an error naming the choices.
//
// Thread-safety: plain values.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/distributed/process_group.h"

namespace gloo::rendezvous {
class Store;
}

namespace anvil::distributed {

struct RankEnvironment {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string socket_ifname;
  bool ipv6 = false;
  std::string rdzv_dir;
  std::string rdzv_url;
  std::string master_addr;
  int master_port = 0;
  std::string job_id = "job";
  std::string backend = "gloo";
  int attempt = 0;
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  std::chrono::milliseconds rendezvous_timeout = std::chrono::minutes(5);

  // Reads the variables above; throws naming the variable, what it expects and what it held.
  static RankEnvironment from_env();
  // Whether ANVIL_WORLD_SIZE is set at all (a program then runs as one rank of a job).
  static bool present();
  // "rank 1 of 4 (local 1), gloo over lo (ipv4), rendezvous <where> prefix <prefix>".
  std::string describe() const;
  // The rendezvous key prefix of this attempt: "anvil/<job>/attempt-<n>/".
  std::string prefix() const;
};

// A rendezvous store for URLs of one scheme ("postgresql"), registered by the program that
// links its client; `timeout` is the rendezvous timeout. Registration is meant for start-up
// (before any rank environment is used): it is not synchronised with lookups.
using RendezvousStoreFactory =
    std::function<std::unique_ptr<gloo::rendezvous::Store>(const std::string& url, std::chrono::milliseconds timeout)>;
void register_rendezvous_store(const std::string& scheme, RendezvousStoreFactory factory);

// The rendezvous store the environment names (file, Redis or a registered URL scheme), under
// the attempt's prefix.
// env.attempt moves up to the newest attempt any rank of the job opened (a node whose ranks
// restarted fewer times catches up).
std::shared_ptr<gloo::rendezvous::Store> make_rendezvous_store(RankEnvironment& env);

// The environment's process group (Gloo, or NCCL on cuda:<local rank>), rendezvous included;
// blocks until every rank joined or the timeout passed.
std::shared_ptr<ProcessGroup> init_process_group(RankEnvironment& env);

}  // namespace anvil::distributed
