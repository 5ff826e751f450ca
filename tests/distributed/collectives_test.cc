// The Gloo process group and DistributedDataParallel with ranks as threads of one process
// (Gloo contexts are independent; an in-memory HashStore is the rendezvous). References are
// float64 sums computed here, and single-process gradients.
#include <gloo/rendezvous/hash_store.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "core/anvil.h"
#include "core/distributed/ddp.h"
#include "core/distributed/gloo_process_group.h"
#include "core/distributed/samplers.h"
#ifdef ANVIL_WITH_NCCL
#include "core/distributed/nccl_process_group.h"
#endif
#include "core/nn/nn.h"

namespace anvil::distributed {
namespace {

using ::testing::HasSubstr;

// Runs body(rank, group) on `world` threads, each with its own group over one HashStore.
void RunRanks(int world, const std::function<void(int, ProcessGroup&)>& body,
              std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        GlooOptions o;
        o.timeout = timeout;
        GlooProcessGroup group(store, r, world, o);
        body(r, group);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Values that depend only on (rank, i): the threads share the default generator.
Tensor RankValues(int rank, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(0.37 * i + 1.3 * rank) * (1 + rank));
  return tensor(v);
}

TEST(GlooProcessGroup, AllReduceMatchesFloat64Reference) {
  constexpr int kWorld = 3;
  constexpr int64_t kN = 1000;
  std::vector<double> sum(kN, 0.0), mx(kN, -1e300), mn(kN, 1e300);
  for (int r = 0; r < kWorld; ++r) {
    const auto v = RankValues(r, kN).to_vector<float>();
    for (int64_t i = 0; i < kN; ++i) {
      sum[i] += v[i];
      mx[i] = std::max<double>(mx[i], v[i]);
      mn[i] = std::min<double>(mn[i], v[i]);
    }
  }
  RunRanks(kWorld, [&](int rank, ProcessGroup& group) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      Tensor t = RankValues(rank, kN);
      group.all_reduce({t}, op)->wait();
      const auto got = t.to_vector<float>();
      for (int64_t i = 0; i < kN; ++i) {
        const double want = op == ReduceOp::kSum   ? sum[i]
                            : op == ReduceOp::kAvg ? sum[i] / kWorld
                            : op == ReduceOp::kMax ? mx[i]
                                                   : mn[i];
        ASSERT_NEAR(got[i], want, 1e-5 * (1 + std::abs(want))) << reduce_op_name(op) << " element " << i;
      }
    }
  });
}

TEST(GlooProcessGroup, SeveralTensorsReduceAsOneBufferAndKeepTheirShapes) {
  RunRanks(2, [](int rank, ProcessGroup& group) {
    Tensor a = full({2, 3}, static_cast<double>(rank + 1));
    Tensor b = full({4}, static_cast<double>(10 * (rank + 1)), TensorOptions(kFloat32));
    Tensor strided = full({3, 2}, 1.0).t();  // not contiguous
    group.all_reduce({a, b, strided}, ReduceOp::kSum)->wait();
    EXPECT_EQ(a.sizes(), IntArray({2, 3}));
    EXPECT_EQ(a.sum().item<double>(), 6 * 3.0);
    EXPECT_EQ(b.sum().item<double>(), 4 * 30.0);
    EXPECT_EQ(strided.sum().item<double>(), 6 * 2.0);
  });
}

TEST(GlooProcessGroup, BroadcastAllGatherReduceScatterBarrier) {
  constexpr int kWorld = 4;
  RunRanks(kWorld, [](int rank, ProcessGroup& group) {
    Tensor t = full({5}, static_cast<double>(rank), TensorOptions(kInt64));
    group.broadcast({t}, 2)->wait();
    EXPECT_EQ(t.to_vector<int64_t>(), std::vector<int64_t>(5, 2));

    std::vector<Tensor> outs;
    for (int r = 0; r < kWorld; ++r) outs.push_back(empty({2}, TensorOptions(kFloat64)));
    group.all_gather(outs, tensor(std::vector<double>{rank * 1.0, rank * 2.0}))->wait();
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ(outs[r].to_vector<double>(), (std::vector<double>{r * 1.0, r * 2.0}));

    // input[j] = rank * 100 + j over 4 chunks of 3: chunk r summed over ranks.
    std::vector<double> in(kWorld * 3);
    for (size_t j = 0; j < in.size(); ++j) in[j] = rank * 100.0 + static_cast<double>(j);
    Tensor out = empty({3}, TensorOptions(kFloat64));
    group.reduce_scatter(out, tensor(in), ReduceOp::kSum)->wait();
    const double rank_sum = 100.0 * (0 + 1 + 2 + 3);
    for (int j = 0; j < 3; ++j) EXPECT_EQ(out.to_vector<double>()[j], rank_sum + kWorld * (rank * 3 + j));
    group.barrier()->wait();
    EXPECT_EQ(group.sequence(), 4);
  });
}

TEST(GlooProcessGroup, AsyncWorkRunsInIssueOrder) {
  RunRanks(2, [](int rank, ProcessGroup& group) {
    std::vector<Tensor> ts;
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < 8; ++i) {
      ts.push_back(full({1000}, static_cast<double>(i + rank), TensorOptions(kFloat32)));
      works.push_back(group.all_reduce({ts.back()}, ReduceOp::kSum));
    }
    for (int i = 7; i >= 0; --i) works[i]->wait();  // waited out of order
    for (int i = 0; i < 8; ++i) {
      EXPECT_TRUE(works[i]->is_completed());
      EXPECT_EQ(works[i]->sequence(), i);
      EXPECT_EQ(ts[i].to_vector<float>()[0], 2.0f * i + 1);
    }
  });
}

TEST(GlooProcessGroup, ArgumentErrorsLeaveTheGroupUsable) {
  RunRanks(2, [](int rank, ProcessGroup& group) {
    Tensor i = full({3}, 1.0, TensorOptions(kInt64));
    try {
      group.all_reduce({i}, ReduceOp::kAvg);
      ADD_FAILURE() << "avg of int64 accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("avg needs floating-point tensors, got int64"));
    }
    std::vector<Tensor> wrong(1, empty({3}));
    EXPECT_THROW(group.all_gather(wrong, full({3}, 1.0)), Error);
    Tensor ok = full({3}, 1.0);
    group.all_reduce({ok}, ReduceOp::kSum)->wait();
    EXPECT_EQ(ok.to_vector<float>()[0], 2.0f);
  });
}

TEST(GlooProcessGroup, ATimeoutNamesTheCollectiveSequenceAndMissingRank) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::string message;
  std::vector<int> missing;
  std::thread rank1([&] {
    GlooOptions o;
    o.timeout = std::chrono::milliseconds(1500);
    GlooProcessGroup group(store, 1, 2, o);
    Tensor t = full({4}, 1.0);
    group.all_reduce({t}, ReduceOp::kSum)->wait();  // #0 together; then rank 1 stops taking part
    std::this_thread::sleep_for(std::chrono::seconds(6));
  });
  {
    GlooOptions o;
    o.timeout = std::chrono::milliseconds(1500);
    GlooProcessGroup group(store, 0, 2, o);
    Tensor t = full({4}, 1.0);
    group.all_reduce({t}, ReduceOp::kSum)->wait();
    Tensor u = full({256}, 1.0);
    try {
      group.all_reduce({u}, ReduceOp::kSum)->wait();
    } catch (const CollectiveError& e) {
      message = e.what();
      missing = e.missing_ranks();
    }
    // The group is broken now: the next collective fails at once with the same error.
    EXPECT_THROW(group.barrier()->wait(), CollectiveError);
  }
  rank1.join();
  EXPECT_THAT(message, HasSubstr("all_reduce(sum, 1 KiB) #1 failed on rank 0 of 2 after"));
  EXPECT_THAT(message, HasSubstr("rank 1 did not arrive"));
  EXPECT_THAT(message, HasSubstr("timeout 1.5 s"));
  EXPECT_EQ(missing, std::vector<int>{1});
}

// ---- DistributedDataParallel ----

std::shared_ptr<nn::Sequential> Mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 3)});
}

// The gradient of the mean loss over all ranks' rows equals the average of the ranks' grads.
TEST(DistributedDataParallel, GradientsAreTheSingleProcessGradientsOfTheGlobalBatch) {
  constexpr int kWorld = 2;
  manual_seed(3);
  const Tensor x = randn({8, 8});
  const Tensor y = tensor(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1});
  auto single = Mlp(11);
  nn::F::cross_entropy(single->forward(x), y).backward();
  std::vector<std::vector<float>> want;
  for (const Tensor& p : single->parameters()) want.push_back(p.grad().to_vector<float>());

  // Models are built here: the rank threads share the default generator.
  std::vector<std::shared_ptr<nn::Sequential>> models = {Mlp(11), Mlp(99)};  // rank 1 starts elsewhere
  RunRanks(kWorld, [&](int rank, ProcessGroup& group) {
    auto model = models[rank];  // construction broadcasts rank 0's
    std::shared_ptr<ProcessGroup> borrowed(&group, [](ProcessGroup*) {});
    DistributedDataParallel ddp(model, borrowed, {.first_bucket_bytes = 200, .bucket_bytes = 600});
    const Tensor xs = x.narrow(0, rank * 4, 4), ys = y.narrow(0, rank * 4, 4);
    nn::F::cross_entropy(ddp.forward(xs), ys).backward();
    const auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto got = params[i].grad().to_vector<float>();
      for (size_t j = 0; j < got.size(); ++j) ASSERT_NEAR(got[j], want[i][j], 1e-6) << "param " << i;
    }
    // Buckets in reverse registration order; the first capped at 200 bytes.
    const auto buckets = ddp.bucket_parameter_names();
    ASSERT_GE(buckets.size(), 2u);
    EXPECT_EQ(buckets.front().front(), "2.bias");
    EXPECT_EQ(buckets.back().back(), "0.weight");
    EXPECT_EQ(ddp.buckets_reduced(), static_cast<int64_t>(buckets.size()));
    EXPECT_GE(ddp.buckets_launched_during_backward(), 1);
  });
}

TEST(DistributedDataParallel, NoSyncAccumulatesLocallyThenReducesTheSum) {
  std::vector<std::shared_ptr<nn::Sequential>> models = {Mlp(5), Mlp(5)};
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    auto model = models[rank];
    std::shared_ptr<ProcessGroup> borrowed(&group, [](ProcessGroup*) {});
    DistributedDataParallel ddp(model, borrowed);
    const Tensor x = full({2, 8}, rank + 1.0);
    {
      DistributedDataParallel::NoSync no_sync(ddp);
      ddp.forward(x).sum().backward();
    }
    EXPECT_EQ(ddp.buckets_reduced(), 0);
    const float local = model->parameters().back().grad().to_vector<float>()[0];  // 2.bias: 2 rows
    EXPECT_EQ(local, 2.0f);
    ddp.forward(x).sum().backward();
    EXPECT_EQ(ddp.buckets_reduced(), 1);
    EXPECT_EQ(model->parameters().back().grad().to_vector<float>()[0], 4.0f);  // (2+2) averaged
  });
}

struct TwoHeads : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  TwoHeads() : nn::Module("TwoHeads") {
    a = register_module("a", std::make_shared<nn::Linear>(4, 2));
    b = register_module("b", std::make_shared<nn::Linear>(4, 2));
  }
  Tensor forward(const Tensor& x) override { return a->forward(x); }  // b is never used
};

TEST(DistributedDataParallel, AnUnusedParameterIsNamedOrFound) {
  std::vector<std::shared_ptr<TwoHeads>> first = {std::make_shared<TwoHeads>(), std::make_shared<TwoHeads>()};
  std::vector<std::shared_ptr<TwoHeads>> second = {std::make_shared<TwoHeads>(), std::make_shared<TwoHeads>()};
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<ProcessGroup> borrowed(&group, [](ProcessGroup*) {});
    {
      auto m = first[rank];
      DistributedDataParallel ddp(m, borrowed);
      try {
        ddp.forward(full({1, 4}, 1.0)).sum().backward();
        ADD_FAILURE() << "an unused parameter was accepted";
      } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("2 parameters received no gradient in this backward pass: b.weight, b.bias"));
        EXPECT_THAT(e.what(), HasSubstr("find_unused_parameters"));
      }
    }
    auto m = second[rank];
    DistributedDataParallel ddp(m, borrowed, {.find_unused_parameters = true});
    ddp.forward(full({1, 4}, rank + 1.0)).sum().backward();
    EXPECT_FALSE(m->b->weight.grad().defined());  // unused on every rank: left alone
    EXPECT_EQ(m->a->bias.grad().to_vector<float>()[0], 1.0f);
  });
}

struct Tied : nn::Module {
  std::shared_ptr<nn::Linear> first, second;
  Tied() : nn::Module("Tied") {
    first = register_module("first", std::make_shared<nn::Linear>(3, 3, false));
    second = register_module("second", first);  // the same layer twice
  }
  Tensor forward(const Tensor& x) override { return second->forward(first->forward(x)); }
};

TEST(DistributedDataParallel, ASharedParameterIsReducedOnce) {
  manual_seed(1);
  std::vector<std::shared_ptr<Tied>> models = {std::make_shared<Tied>(), std::make_shared<Tied>()};
  auto ref = std::make_shared<Tied>();
  {
    NoGradGuard no_grad;
    ref->first->weight.copy_(models[0]->first->weight);
  }
  ref->forward(full({2, 3}, 1.0)).sum().backward();
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    auto m = models[rank];
    std::shared_ptr<ProcessGroup> borrowed(&group, [](ProcessGroup*) {});
    DistributedDataParallel ddp(m, borrowed);
    EXPECT_EQ(ddp.bucket_parameter_names(), (std::vector<std::vector<std::string>>{{"first.weight"}}));
    const Tensor x = full({2, 3}, 1.0);
    ddp.forward(x).sum().backward();
    // Identical inputs on both ranks: the average is the single-process gradient (ref).
    EXPECT_TRUE(allclose(m->first->weight.grad(), ref->first->weight.grad()));
  });
}

TEST(DistributedDataParallel, ShapeMismatchAcrossRanksIsNamed) {
  std::vector<std::shared_ptr<nn::Linear>> models = {std::make_shared<nn::Linear>(4, 2),
                                                     std::make_shared<nn::Linear>(4, 3)};
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    auto m = models[rank];
    std::shared_ptr<ProcessGroup> borrowed(&group, [](ProcessGroup*) {});
    try {
      DistributedDataParallel ddp(m, borrowed);
      ADD_FAILURE() << "different shapes accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("parameter 'weight' has shape [2, 4]"));
      EXPECT_THAT(e.what(), HasSubstr("[3, 4] on rank 1"));
    }
  });
}

TEST(DistributedDataParallel, BuffersAreBroadcastFromRankZeroBeforeEachTrainingForward) {
  manual_seed(2);
  auto make = [] {
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::BatchNorm1d>(4)});
  };
  std::vector<std::shared_ptr<nn::Sequential>> models = {make(), make()};
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<ProcessGroup> borrowed(&group, [](ProcessGroup*) {});
    DistributedDataParallel ddp(models[rank], borrowed);
    auto running_means = [&] {
      std::vector<Tensor> outs = {empty({4}), empty({4})};
      group.all_gather(outs, models[rank]->buffers()[0].clone())->wait();
      return outs;
    };
    ddp.forward(full({5, 3}, rank + 1.0) + arange(15).view({5, 3}).to(kFloat32));  // each rank its own batch
    auto after_first = running_means();
    EXPECT_FALSE(allclose(after_first[0], after_first[1]));  // updated from different batches
    ddp.forward(arange(15).view({5, 3}).to(kFloat32));       // the same batch on both ranks
    auto after_second = running_means();
    // Rank 1 started the second forward from rank 0's buffers, so the same update leaves them equal.
    EXPECT_TRUE(allclose(after_second[0], after_second[1], 0, 0));
  });
}

TEST(RankAgreement, ADriftedParameterIsNamedWithTheRanksHoldingEachValue) {
  std::vector<std::shared_ptr<nn::Sequential>> models = {Mlp(5), Mlp(5), Mlp(5)};
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    auto model = models[rank];
    check_rank_agreement(*model, group, 10);  // identical: passes
    if (rank == 2) {
      NoGradGuard no_grad;
      model->parameters()[2].add_(1e-3);  // 2.weight drifts on rank 2 only
    }
    try {
      check_rank_agreement(*model, group, 20);
      ADD_FAILURE() << "divergence not caught";
    } catch (const RankDivergenceError& e) {
      EXPECT_EQ(e.parameter(), "2.weight");
      EXPECT_THAT(e.what(), HasSubstr("ranks disagree on parameter '2.weight' at step 20"));
      EXPECT_THAT(e.what(), HasSubstr("ranks 0, 1 hold value #1; rank 2 holds value #2"));
      EXPECT_THAT(e.what(), HasSubstr("largest difference from rank 0: 0.001"));
    }
  });
}

#ifdef ANVIL_WITH_NCCL
// A one-rank NCCL group on a GPU (the GPU check runs it; several ranks need several GPUs).
TEST(NcclProcessGroup, OneRankGroupReducesBroadcastsAndTrainsDdpOnTheGpu) {
  std::string why;
  if (!nccl_available(&why)) GTEST_SKIP() << "NCCL not usable here: " << why;
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  auto group = std::make_shared<NcclProcessGroup>(store, 0, 1, 0);
  const Device gpu(DeviceType::CUDA, 0);
  Tensor t = full({1000}, 3.0).to(gpu);
  group->all_reduce({t}, ReduceOp::kAvg)->wait();
  EXPECT_EQ(t.to(kCPU).to_vector<float>()[999], 3.0f);
  Tensor a = full({2, 3}, 1.0).to(gpu), b = full({5}, 2.0).to(gpu);
  group->all_reduce({a, b}, ReduceOp::kSum)->wait();
  EXPECT_EQ(b.to(kCPU).sum().item<double>(), 10.0);
  std::vector<Tensor> outs = {empty({4}, TensorOptions(kFloat32).with_device(gpu))};
  group->all_gather(outs, full({4}, 7.0).to(gpu))->wait();
  EXPECT_EQ(outs[0].to(kCPU).to_vector<float>()[3], 7.0f);
  group->barrier()->wait();
  // DDP on the GPU with one rank: the gradients are the plain ones.
  auto model = Mlp(4);
  auto ref = Mlp(4);
  model->to(gpu);
  DistributedDataParallel ddp(model, group);
  const Tensor x = full({4, 8}, 0.5);
  ddp.forward(x.to(gpu)).sum().backward();
  ref->forward(x).sum().backward();
  EXPECT_TRUE(allclose(model->parameters()[0].grad().to(kCPU), ref->parameters()[0].grad(), 1e-5, 1e-6));
  EXPECT_EQ(ddp.buckets_reduced(), 1);
}
#endif

TEST(EvaluationShardSampler, EverySampleOnceAcrossRanks) {
  for (int64_t n : {1, 7, 300, 301}) {
    for (int64_t world : {1, 2, 3, 4}) {
      std::vector<int> seen(n, 0);
      for (int64_t r = 0; r < world; ++r) {
        EvaluationShardSampler s(n, world, r);
        for (int64_t i : s.indices()) ++seen[i];
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "n " << n << " world " << world << " index " << i;
    }
  }
}

}  // namespace
}  // namespace anvil::distributed
