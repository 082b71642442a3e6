#include "fusetune/wire/records_convert.h"
#include "fusetune/wire/status.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace fusetune {
namespace {

v1::Problem SeedProto() {
  v1::Problem p;
  p.set_batch(1);
  p.set_q_heads(12);
  p.set_q_len(2048);
  p.set_kv_len(2048);
  p.set_head_dim(64);
  return p;
}

TEST(ServiceConvert, ProblemDefaultsKindDtypeAndKvHeads) {
  auto p = ProblemFromProto(SeedProto());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Key(), "prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32");
}

TEST(ServiceConvert, ProblemRoundTripKeepsLengthLists) {
  AttentionProblem p;
  p.batch = 2;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.q_len = 5;
  p.kv_len = 7;
  p.cu_seqlens_q = {0, 3, 8};
  p.cu_seqlens_k = {0, 7, 13};
  p.head_dim = 128;
  p.causal = true;
  p.dtype = DType::kBf16;
  v1::Problem proto;
  ProblemToProto(p, &proto);
  auto back = ProblemFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Key(), p.Key());
  EXPECT_EQ(back->cu_seqlens_k, p.cu_seqlens_k);
}

TEST(ServiceConvert, PagedDecodeProblemRoundTripKeepsEveryPagedField) {
  AttentionProblem p;
  p.kind = ProblemKind::kDecode;
  p.batch = 3;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.q_len = 2;
  p.kv_len = 100;
  p.kv_valid_lens = {40, 100, 33};
  p.head_dim = 128;
  p.causal = true;
  p.dtype = DType::kBf16;
  p.page_block_size = 16;
  p.kv_pool_pages = 40;
  p.block_table_width = 9;
  p.shared_prefix_pages = 2;
  ASSERT_TRUE(p.Validate().ok()) << p.Validate();
  v1::Problem proto;
  ProblemToProto(p, &proto);
  EXPECT_EQ(proto.kv_pool_pages(), 40);
  EXPECT_EQ(proto.block_table_width(), 9);
  EXPECT_EQ(proto.shared_prefix_pages(), 2);
  auto back = ProblemFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Key(), p.Key());
  EXPECT_EQ(back->kv_valid_lens, p.kv_valid_lens);
  EXPECT_EQ(back->shared_prefix_pages, 2);
}

TEST(ServiceConvert, BadPagedFieldsAreInvalidArgument) {
  auto with = [](auto edit) {
    v1::Problem p = SeedProto();
    p.set_kind("decode");
    p.set_q_len(1);
    edit(p);
    return ProblemFromProto(p).status();
  };
  EXPECT_TRUE(with([](v1::Problem& p) { p.set_page_block_size(16); }).ok());
  EXPECT_EQ(with([](v1::Problem& p) { p.set_page_block_size(257); }).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](v1::Problem& p) { p.set_kv_pool_pages(8); }).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](v1::Problem& p) {
              p.set_page_block_size(16);
              p.set_block_table_width(3);  // 2048 keys need 128 pages
            }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](v1::Problem& p) {
              p.set_page_block_size(16);
              p.set_shared_prefix_pages(-1);
            }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](v1::Problem& p) {
              p.set_page_block_size(16);
              p.set_shared_prefix_pages(129);
            }).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConvert, ProblemRejectsBadFieldsWithInvalidArgument) {
  auto with = [](auto edit) {
    v1::Problem p = SeedProto();
    edit(p);
    return ProblemFromProto(p).status();
  };
  EXPECT_EQ(with([](v1::Problem& p) { p.set_q_heads(0); }).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](v1::Problem& p) { p.set_head_dim(1000); }).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](v1::Problem& p) { p.set_batch(-3); }).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](v1::Problem& p) { p.set_dtype("fp8"); }).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](v1::Problem& p) { p.set_kind("train"); }).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](v1::Problem& p) { p.set_softmax_scale(std::nanf("")); }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](v1::Problem& p) { p.set_batch(1 << 30); }).code(), absl::StatusCode::kInvalidArgument);
  // A length list far longer than any valid batch is refused before it is copied.
  EXPECT_EQ(with([](v1::Problem& p) {
              for (int i = 0; i < kMaxBatch + 2; ++i) p.add_cu_seqlens_q(i);
            }).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConvert, JobProblemCapsTensorSize) {
  v1::Problem p = SeedProto();
  p.set_batch(1024);
  p.set_q_heads(64);
  p.set_q_len(1 << 16);
  p.set_kv_len(1 << 16);
  p.set_head_dim(128);  // 2^39 elements: beyond Validate already
  EXPECT_FALSE(ProblemFromProto(p).ok());
  p.set_batch(32);
  p.set_q_heads(16);  // 2^5 * 2^4 * 2^16 * 2^7 = 2^32 elements: a valid lookup, too big a job
  EXPECT_TRUE(ProblemFromProto(p).ok());
  EXPECT_EQ(JobProblemFromProto(p).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConvert, ConfigFromFieldsOrKey) {
  KernelConfig c;
  c.block_m = 32;
  c.block_s = 16;
  c.threads = 4;
  c.stages = 2;
  v1::Config proto;
  ConfigToProto(c, &proto);
  auto back = ConfigFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, c);
  v1::Config key_only;
  key_only.set_key(c.Key());
  auto from_key = ConfigFromProto(key_only);
  ASSERT_TRUE(from_key.ok()) << from_key.status();
  EXPECT_EQ(*from_key, c);
  proto.set_key("fused/bm64/bs64/t1/fp32/st1");
  EXPECT_EQ(ConfigFromProto(proto).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConfigFromProto(v1::Config()).status().code(), absl::StatusCode::kInvalidArgument);
}

// split_kv 0 is both proto3's "unset" and a planned split (/skauto): a config sent with its
// fields and key must come back as it was sent.
TEST(ServiceConvert, APlannedSplitSurvivesTheWire) {
  for (const char* key : {"fused/bm16/bs64/t128/bf16/st2/skauto", "fused/bm16/bs64/t128/bf16/st2/sk8",
                          "fused/bm16/bs64/t128/bf16/st2"}) {
    auto c = KernelConfig::FromKey(key);
    ASSERT_TRUE(c.ok()) << c.status();
    v1::Config proto;
    ConfigToProto(*c, &proto);
    auto back = ConfigFromProto(proto);
    ASSERT_TRUE(back.ok()) << key << ": " << back.status();
    EXPECT_EQ(back->Key(), key);
  }
  // Fields without a key: split_kv 0 is unset, one split.
  v1::Config fields;
  fields.set_variant("fused");
  fields.set_block_m(16);
  fields.set_block_s(64);
  fields.set_threads(128);
  fields.set_precision("bf16");
  fields.set_stages(2);
  auto unset = ConfigFromProto(fields);
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_EQ(unset->split_kv, 1);
  fields.set_split_kv(-1);
  EXPECT_EQ(ConfigFromProto(fields).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConvert, ScheduleFlagsSurviveTheWire) {
  for (const char* key : {"fused/bm128/bs128/t384/bf16/st2/pingpong/persistent",
                          "fused/bm128/bs128/t384/bf16/st2/pingpong",
                          "fused/bm128/bs128/t384/bf16/st2/persistent",
                          "fused/bm128/bs128/t384/bf16/st2/skauto/pingpong"}) {
    auto c = KernelConfig::FromKey(key);
    ASSERT_TRUE(c.ok()) << c.status();
    v1::Config proto;
    ConfigToProto(*c, &proto);
    EXPECT_EQ(proto.pingpong(), c->pingpong) << key;
    EXPECT_EQ(proto.persistent(), c->persistent) << key;
    auto back = ConfigFromProto(proto);
    ASSERT_TRUE(back.ok()) << key << ": " << back.status();
    EXPECT_EQ(*back, *c) << key;
    EXPECT_EQ(back->Key(), key);
    // The key alone says the same.
    v1::Config key_only;
    key_only.set_key(key);
    back = ConfigFromProto(key_only);
    ASSERT_TRUE(back.ok()) << key << ": " << back.status();
    EXPECT_EQ(*back, *c) << key;
  }
  // Fields without a key.
  v1::Config fields;
  fields.set_variant("fused");
  fields.set_block_m(128);
  fields.set_block_s(128);
  fields.set_threads(384);
  fields.set_precision("bf16");
  fields.set_stages(2);
  fields.set_pingpong(true);
  auto from_fields = ConfigFromProto(fields);
  ASSERT_TRUE(from_fields.ok()) << from_fields.status();
  EXPECT_TRUE(from_fields->pingpong);
  EXPECT_FALSE(from_fields->persistent);
  // A key and fields that disagree on a flag, either way round.
  fields.set_key("fused/bm128/bs128/t384/bf16/st2/pingpong/persistent");
  EXPECT_EQ(ConfigFromProto(fields).status().code(), absl::StatusCode::kInvalidArgument);
  fields.set_key("fused/bm128/bs128/t384/bf16/st2");
  EXPECT_EQ(ConfigFromProto(fields).status().code(), absl::StatusCode::kInvalidArgument);
  fields.set_key("fused/bm128/bs128/t384/bf16/st2/pingpong");
  EXPECT_TRUE(ConfigFromProto(fields).ok());
}

v1::Trial GoodTrial() {
  v1::Trial t;
  t.set_run_id(7);
  t.set_problem_key("prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32");
  t.set_config_key("fused/bm64/bs32/t4/fp32/st1");
  t.set_attempt(0);
  t.set_trial_id(TrialId(7, t.problem_key(), t.config_key(), 0));
  t.set_outcome("ok");
  for (double s : {10.0, 11.0, 12.0}) t.add_samples_us(s);
  t.set_median_us(11);
  t.set_p10_us(10);
  t.set_p90_us(12);
  return t;
}

TEST(ServiceConvert, TrialRoundTrip) {
  auto t = TrialFromProto(GoodTrial());
  ASSERT_TRUE(t.ok()) << t.status();
  v1::Trial back;
  TrialToProto(*t, &back);
  EXPECT_EQ(back.SerializeAsString(), GoodTrial().SerializeAsString());
}

TEST(ServiceConvert, TrialCarriesTheErrorAgainstTheUnquantisedReference) {
  v1::Trial sent = GoodTrial();
  sent.set_problem_key("decode/b16/hq32/hkv8/q1/k8192/d128/causal0/bf16/kve4m3");
  sent.set_trial_id(TrialId(7, sent.problem_key(), sent.config_key(), 0));
  sent.set_max_rel_error(1e-3);
  sent.set_unquantised_rel_error(0.02);
  auto t = TrialFromProto(sent);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->unquantised_rel_error, 0.02);
  v1::Trial back;
  TrialToProto(*t, &back);
  EXPECT_EQ(back.unquantised_rel_error(), 0.02);
  EXPECT_EQ(back.SerializeAsString(), sent.SerializeAsString());
  // Not sent (an older client): 0, as for a problem whose K/V are not quantised.
  EXPECT_EQ(TrialFromProto(GoodTrial())->unquantised_rel_error, 0.0);
  sent.set_unquantised_rel_error(-1);
  EXPECT_EQ(TrialFromProto(sent).status().code(), absl::StatusCode::kInvalidArgument);
  sent.set_unquantised_rel_error(std::nan(""));
  EXPECT_NE(TrialFromProto(sent).status().message().find("unquantised_rel_error"), std::string::npos);
}

TEST(ServiceConvert, TrialRejectsForgedIdsSamplesAndNaN) {
  auto with = [](auto edit) {
    v1::Trial t = GoodTrial();
    edit(t);
    return TrialFromProto(t).status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(with([](v1::Trial& t) { t.set_trial_id("abc"); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.set_run_id(-1); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.set_outcome("great"); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.set_median_us(std::nan("")); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.set_max_rel_error(std::nan("")); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.set_config_key("fused/garbage"); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) {
              for (int i = 0; i < kMaxSamplesPerTrial; ++i) t.add_samples_us(1.0);
            }),
            kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.set_message(std::string(kMaxTextLength + 1, 'x')); }), kInvalid);
  // +inf error is a legitimate measurement of a failed verification.
  EXPECT_EQ(with([](v1::Trial& t) {
              t.set_outcome("verify_failed");
              t.set_max_rel_error(std::numeric_limits<double>::infinity());
            }),
            absl::StatusCode::kOk);
}

v1::Trial GoodFinalTrial() {
  v1::Trial t = GoodTrial();
  t.set_stage(v1::TRIAL_STAGE_FINAL);
  t.set_attempt(1);
  t.set_trial_id(TrialId(7, t.problem_key(), t.config_key(), 1, TrialStage::kFinal));
  for (double m : {10.0, 11.0, 12.0}) {
    v1::SampleBlock* b = t.add_blocks();
    b->set_samples(25);
    b->set_median_us(m);
    b->mutable_before()->set_known(true);
    b->mutable_before()->set_sm_clock_mhz(1980);
    b->mutable_before()->set_power_mw(650000);
    b->mutable_before()->set_throttle_reasons(0x4);
    b->mutable_after()->set_known(true);
    b->mutable_after()->set_sm_clock_mhz(1755);
    b->mutable_after()->set_power_mw(690000);
    b->mutable_after()->set_throttle_reasons(0x4);
    b->set_unsteady(m == 12.0);
    b->set_graphed(m == 11.0);
  }
  t.set_wall_seconds(0.125);
  return t;
}

TEST(ServiceConvert, TrialStageBlocksAndWallSecondsRoundTrip) {
  auto t = TrialFromProto(GoodFinalTrial());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->stage, TrialStage::kFinal);
  ASSERT_EQ(t->blocks.size(), 3u);
  EXPECT_EQ(t->blocks[0].samples, 25);
  EXPECT_EQ(t->blocks[1].median_us, 11.0);
  EXPECT_TRUE(t->blocks[0].before.known);
  EXPECT_EQ(t->blocks[0].before.sm_clock_mhz, 1980);
  EXPECT_EQ(t->blocks[0].after.power_mw, 690000);
  EXPECT_EQ(t->blocks[0].after.throttle_reasons, 0x4u);
  EXPECT_FALSE(t->blocks[0].unsteady);
  EXPECT_TRUE(t->blocks[2].unsteady);
  EXPECT_FALSE(t->blocks[0].graphed);
  EXPECT_TRUE(t->blocks[1].graphed);
  EXPECT_EQ(t->wall_seconds, 0.125);
  v1::Trial back;
  TrialToProto(*t, &back);
  EXPECT_EQ(back.SerializeAsString(), GoodFinalTrial().SerializeAsString());
}

TEST(ServiceConvert, TrialIdIncludesTheStageOfNonScreenTrials) {
  // The screen formula on a final trial is a forged id.
  v1::Trial t = GoodFinalTrial();
  t.set_trial_id(TrialId(7, t.problem_key(), t.config_key(), 1));
  absl::Status refused = TrialFromProto(t).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find(TrialId(7, t.problem_key(), t.config_key(), 1, TrialStage::kFinal)),
            std::string::npos)
      << refused;
  // An empty id is derived with the stage, so a screen and an audit trial never collide.
  t.clear_trial_id();
  t.set_stage(v1::TRIAL_STAGE_AUDIT);
  auto audit = TrialFromProto(t);
  ASSERT_TRUE(audit.ok()) << audit.status();
  EXPECT_EQ(audit->trial_id, TrialId(7, t.problem_key(), t.config_key(), 1, TrialStage::kAudit));
  t.set_stage(v1::TRIAL_STAGE_SCREEN);
  auto screen = TrialFromProto(t);
  ASSERT_TRUE(screen.ok()) << screen.status();
  EXPECT_NE(screen->trial_id, audit->trial_id);
}

TEST(ServiceConvert, TrialWithoutStageFieldsReadsAsScreen) {
  // What a worker that sends no stage sends.
  auto t = TrialFromProto(GoodTrial());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->stage, TrialStage::kScreen);
  EXPECT_TRUE(t->blocks.empty());
  EXPECT_EQ(t->wall_seconds, 0.0);
}

TEST(ServiceConvert, TrialRejectsBadStageBlocksAndWallSeconds) {
  auto with = [](auto edit) {
    v1::Trial t = GoodFinalTrial();
    edit(t);
    return TrialFromProto(t).status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(with([](v1::Trial& t) { t.set_stage(static_cast<v1::TrialStage>(7)); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.set_wall_seconds(-1); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.set_wall_seconds(std::nan("")); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.set_wall_seconds(std::numeric_limits<double>::infinity()); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.mutable_blocks(0)->set_median_us(std::nan("")); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.mutable_blocks(0)->set_median_us(-2); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.mutable_blocks(1)->set_samples(-1); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.mutable_blocks(1)->mutable_before()->set_sm_clock_mhz(-5); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) { t.mutable_blocks(2)->mutable_after()->set_power_mw(-1); }), kInvalid);
  EXPECT_EQ(with([](v1::Trial& t) {
              for (int i = 0; i < kMaxBlocksPerTrial; ++i) t.add_blocks();
            }),
            kInvalid);
  EXPECT_EQ(with([](v1::Trial&) {}), absl::StatusCode::kOk);
}

v1::AuditSummary GoodAudit() {
  v1::AuditSummary a;
  a.set_run_id(7);
  a.set_device_class("cpu/Test-CPU/x86_64-avx2");
  a.set_problem_key("prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32");
  a.set_recorded_config_key("fused/bm64/bs32/t4/fp32/st1");
  a.set_best_config_key("fused/bm32/bs32/t4/fp32/st1");
  a.set_recorded_us(11.5);
  a.set_best_us(11.0);
  a.set_regret(0.045);
  a.set_regret_low(0.01);
  a.set_regret_high(0.08);
  a.set_rounds(15);
  a.set_configs_measured(40);
  a.set_configs_failed(2);
  a.set_commit("abc123");
  a.set_created_unix_ms(1700000000000);
  return a;
}

TEST(ServiceConvert, AuditSummaryRoundTrip) {
  auto a = AuditSummaryFromProto(GoodAudit());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->problem_key, GoodAudit().problem_key());
  EXPECT_EQ(a->regret_high, 0.08);
  EXPECT_EQ(a->configs_failed, 2);
  v1::AuditSummary back;
  AuditSummaryToProto(*a, &back);
  EXPECT_EQ(back.SerializeAsString(), GoodAudit().SerializeAsString());
}

TEST(ServiceConvert, AnAuditsCommitIsReceivedInCanonicalForm) {
  v1::AuditSummary full = GoodAudit();
  full.set_commit("ABCDEF1234567890ABCDEF1234567890ABCDEF12");
  auto a = AuditSummaryFromProto(full);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->commit, "abcdef123456");
}

TEST(ServiceConvert, AuditSummaryRejectsMalformedFields) {
  auto with = [](auto edit) {
    v1::AuditSummary a = GoodAudit();
    edit(a);
    return AuditSummaryFromProto(a).status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.clear_problem_key(); }), kInvalid);
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_recorded_config_key("fused/garbage"); }), kInvalid);
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.clear_best_config_key(); }), kInvalid);
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_device_class("tpu/x/y"); }), kInvalid);
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_best_us(std::nan("")); }), kInvalid);
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_recorded_us(-1); }), kInvalid);
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_regret(std::numeric_limits<double>::infinity()); }), kInvalid);
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_regret(0.5); }), kInvalid);       // above regret_high
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_regret_low(-1.5); }), kInvalid);  // a ratio below 0
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_rounds(0); }), kInvalid);
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_configs_measured(0); }), kInvalid);
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_configs_failed(-1); }), kInvalid);
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_run_id(-3); }), kInvalid);
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_commit("abc1234"); }), kInvalid);  // abbreviated
  EXPECT_EQ(with([](v1::AuditSummary& a) { a.set_commit("two words"); }), kInvalid);
  // The server fills these from the job.
  EXPECT_EQ(with([](v1::AuditSummary& a) {
              a.clear_device_class();
              a.clear_run_id();
              a.clear_commit();
            }),
            absl::StatusCode::kOk);
}

TEST(ServiceConvert, JobKindNamesRoundTrip) {
  for (v1::JobKind kind : {v1::JOB_KIND_TUNE, v1::JOB_KIND_AUDIT}) {
    auto back = ParseJobKind(JobKindName(kind));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, kind);
  }
  EXPECT_EQ(JobKindName(v1::JOB_KIND_AUDIT), "audit");
  EXPECT_EQ(ParseJobKind("Audit").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJobKind("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceConvert, DeviceClassShape) {
  EXPECT_TRUE(ValidateDeviceClass("cuda/NVIDIA-H200/sm90").ok());
  EXPECT_TRUE(ValidateDeviceClass("cpu/AMD-EPYC-7B13/x86_64-avx2").ok());
  EXPECT_TRUE(ValidateDeviceClass("cpu/Intel(R)-Xeon(R)-CPU-@-2.20GHz/x86_64-avx2").ok());
  EXPECT_FALSE(ValidateDeviceClass("cpu/a\"b/x86").ok());
  EXPECT_FALSE(ValidateDeviceClass("").ok());
  EXPECT_FALSE(ValidateDeviceClass("tpu/v5/x").ok());
  EXPECT_FALSE(ValidateDeviceClass("cuda/H200").ok());
  EXPECT_FALSE(ValidateDeviceClass("cuda//sm90").ok());
  EXPECT_FALSE(ValidateDeviceClass("cuda/H 200/sm90").ok());
  EXPECT_FALSE(ValidateDeviceClass("cuda/" + std::string(300, 'a') + "/sm90").ok());
}

TEST(ServiceConvert, DeviceInfoRoundTripAndBounds) {
  DeviceInfo d;
  d.backend = "cuda";
  d.name = "NVIDIA H200";
  d.arch = "sm90";
  d.sm_count = 132;
  v1::DeviceInfo proto;
  DeviceInfoToProto(d, &proto);
  EXPECT_EQ(proto.device_class(), "cuda/NVIDIA-H200/sm90");
  auto back = DeviceInfoFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->DeviceClass(), d.DeviceClass());
  proto.set_backend("tpu");
  EXPECT_FALSE(DeviceInfoFromProto(proto).ok());
  proto.set_backend("cuda");
  proto.set_sm_count(-1);
  EXPECT_FALSE(DeviceInfoFromProto(proto).ok());
}

TEST(ServiceConvert, StatusCodesMapBothWays) {
  absl::Status s = absl::ResourceExhaustedError("too many");
  grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(FromGrpcStatus(g), s);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace fusetune
