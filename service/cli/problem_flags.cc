#include "problem_flags.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_join.h"
#include "fusetune/db/store.h"

#include "commands.h"

namespace fusetune::cli {

void ProblemFlags::Register(CLI::App* command, bool allow_list) {
  auto* group = command->add_option_group("Problem", "the attention shape(s)");
  if (allow_list) {
    group->add_option("--preset", preset,
                      "a named problem set: 'seed' = batch 1, 12 heads, head dim 64, S = " +
                          absl::StrJoin(kSeedSeqLens, ", ") +
                          ", fp32, non-causal; 'decode' = serving shapes against a KV cache (batch 16, 32 query "
                      "and 8 KV heads, head dim 128, bf16: decode at cache 1k/8k/32k, batch 1 at 64k, paged "
                      "with pages of 16 and 1 at 8k, and 512 new tokens over an 8k prefix, contiguous and "
                      "paged with a shared prefix)")
        ->check(CLI::IsMember({"seed", "decode"}));
  }
  group->add_option("--problem", problem_key,
                    "a canonical problem key, e.g. prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32");
  group->add_option("--kind", kind, "prefill or decode (decode: 1..16 new tokens per sequence against a KV cache)")
      ->check(CLI::IsMember({"prefill", "decode"}))
      ->capture_default_str();
  batch_option_ = group->add_option("--batch", batch, "sequences per batch")->capture_default_str();
  group->add_option("--heads", heads, "query heads")->capture_default_str();
  group->add_option("--kv-heads", kv_heads, "key/value heads (must divide --heads; default = --heads)");
  auto* seq_opt = group->add_option("--seq", seq,
                                    allow_list ? "query lengths, comma-separated (one problem each; decode: "
                                                 "cache lengths)"
                                               : "query length (decode: cache length)");
  auto* cache_opt = group->add_option("--cache-len", cache_len,
                                      allow_list ? "KV cache lengths (keys per sequence, the new tokens' "
                                                   "included), comma-separated, one problem each"
                                                 : "KV cache length (keys per sequence, the new tokens' included)");
  if (allow_list) {
    seq_opt->delimiter(',');
    cache_opt->delimiter(',');
  } else {
    seq_opt->expected(1);
    cache_opt->expected(1);
  }
  group->add_option("--kv-seq", kv_seq, "key lengths (default = --seq; one value applies to every --seq)")
      ->delimiter(',');
  group->add_option("--cache-lens", cache_lens,
                    "per-sequence KV cache lengths of one problem, comma-separated (batch = their count)")
      ->delimiter(',');
  new_tokens_option_ = group->add_option("--new-tokens", new_tokens,
                    "queries per sequence against the cache (decode: 1..16, default 1; prefill with "
                    "--cache-len/--cache-lens: required)");
  group->add_option("--head-dim", head_dim, "head dimension")->capture_default_str();
  group->add_flag("--causal", causal, "causal mask (bottom-right aligned)");
  group->add_option("--dtype", dtype, "storage type: fp32, fp16 or bf16")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  group->add_option("--kv-storage", kv_storage,
                    "storage of K and V: dtype (as Q) or e4m3 (FP8 with one fp32 scale per KV head and tensor, "
                    "as serving engines keep a quantised cache; needs --dtype fp16 or bf16)")
      ->check(CLI::IsMember({"dtype", "e4m3"}))
      ->capture_default_str();
  page_size_option_ = group->add_option("--page-size", page_size,
                    "tokens per page of a paged KV cache, 1..256 (default: contiguous K/V)");
  pool_pages_option_ = group->add_option(
      "--pool-pages", pool_pages,
      "pages in the paged cache's pool, at least those the sequences need (the default)");
  group->add_option("--shared-prefix-pages", shared_prefix_pages,
                    "leading pages every sequence shares (prefix caching; needs --page-size)");
}

absl::Status ProblemFlags::CheckSources() const {
  const int sources = (!preset.empty()) + (!problem_key.empty()) + (!seq.empty()) + (!cache_len.empty()) +
                      (!cache_lens.empty());
  if (sources == 0) {
    return absl::InvalidArgumentError(
        "say which problems: --seq or --cache-len/--cache-lens (with the shape flags), --problem or --preset");
  }
  if (sources > 1) {
    return absl::InvalidArgumentError("use only one of --seq, --cache-len, --cache-lens, --problem and --preset");
  }
  const bool shape_flags = !seq.empty() || !cache_len.empty() || !cache_lens.empty();
  if (!shape_flags && (new_tokens != 0 || page_size != 0 || pool_pages != 0 || shared_prefix_pages != 0)) {
    return absl::InvalidArgumentError(
        "--new-tokens, --page-size, --pool-pages and --shared-prefix-pages go with --seq or --cache-len/--cache-lens");
  }
  if (!shape_flags && kv_storage != "dtype") {
    return absl::InvalidArgumentError(
        "--kv-storage goes with --seq or --cache-len/--cache-lens (a --problem key says /kve4m3 itself)");
  }
  if (!kv_seq.empty() && seq.empty()) return absl::InvalidArgumentError("--kv-seq goes with --seq");
  if (!kv_seq.empty() && kv_seq.size() != 1 && kv_seq.size() != seq.size()) {
    return absl::InvalidArgumentError("--kv-seq takes one value or as many as --seq");
  }
  return absl::OkStatus();
}

absl::StatusOr<AttentionProblem> ProblemFlags::BaseProblem() const {
  absl::StatusOr<DType> parsed_dtype = ParseDType(dtype);
  if (!parsed_dtype.ok()) return absl::InvalidArgumentError(std::string("--dtype: ") + std::string(parsed_dtype.status().message()));
  absl::StatusOr<KvStorage> parsed_kv_storage = ParseKvStorage(kv_storage);
  if (!parsed_kv_storage.ok()) {
    return absl::InvalidArgumentError(std::string("--kv-storage: ") + std::string(parsed_kv_storage.status().message()));
  }
  absl::StatusOr<ProblemKind> parsed_kind = ParseProblemKind(kind);
  if (!parsed_kind.ok()) return absl::InvalidArgumentError(std::string("--kind: ") + std::string(parsed_kind.status().message()));
  const bool decode = *parsed_kind == ProblemKind::kDecode;
  auto given = [](const CLI::Option* o) { return o != nullptr && o->count() > 0; };
  if (new_tokens < 0 || (given(new_tokens_option_) && new_tokens < 1)) {
    return absl::InvalidArgumentError("--new-tokens must be >= 1, got " + std::to_string(new_tokens));
  }
  if (given(page_size_option_) && (page_size < 1 || page_size > kMaxPageBlockSize)) {
    return absl::InvalidArgumentError("--page-size must be in [1, " + std::to_string(kMaxPageBlockSize) + "], got " +
                                      std::to_string(page_size) + " (leave it out for a contiguous cache)");
  }
  if (given(pool_pages_option_) && pool_pages < 1) {
    return absl::InvalidArgumentError("--pool-pages must be >= 1, got " + std::to_string(pool_pages));
  }
  if (!decode && !seq.empty() && new_tokens != 0) {
    return absl::InvalidArgumentError(
        "a prefill takes its query length from --seq or --new-tokens (with --cache-len), not both");
  }
  if (!decode && seq.empty() && new_tokens == 0) {
    return absl::InvalidArgumentError("a prefill against a KV cache needs --new-tokens (its query length)");
  }
  if (!cache_lens.empty() && batch_option_ != nullptr && batch_option_->count() > 0 &&
      batch != static_cast<int>(cache_lens.size())) {
    return absl::InvalidArgumentError("--batch " + std::to_string(batch) + " disagrees with the " +
                                      std::to_string(cache_lens.size()) + " lengths of --cache-lens");
  }
  AttentionProblem base;
  base.kind = *parsed_kind;
  base.batch = batch;
  base.q_heads = heads;
  base.kv_heads = kv_heads == 0 ? heads : kv_heads;
  base.q_len = new_tokens != 0 ? new_tokens : 1;  // against a cache; --seq sets a prefill's below
  base.head_dim = head_dim;
  base.causal = causal;
  base.dtype = *parsed_dtype;
  base.kv_storage = *parsed_kv_storage;
  base.page_block_size = page_size;
  base.kv_pool_pages = pool_pages;
  base.shared_prefix_pages = shared_prefix_pages;
  return base;
}

absl::StatusOr<std::vector<AttentionProblem>> ProblemFlags::Build() const {
  if (absl::Status s = CheckSources(); !s.ok()) return s;
  if (preset == "seed") return SeedPresetProblems();
  if (preset == "decode") return DecodePresetProblems();
  if (!problem_key.empty()) {
    absl::StatusOr<AttentionProblem> p = AttentionProblem::FromKey(problem_key);
    if (!p.ok()) return absl::InvalidArgumentError(std::string("--problem: ") + std::string(p.status().message()));
    return std::vector<AttentionProblem>{*p};
  }
  absl::StatusOr<AttentionProblem> base = BaseProblem();
  if (!base.ok()) return base.status();
  std::vector<AttentionProblem> out;
  auto add = [&out](AttentionProblem p, const std::string& flag) -> absl::Status {
    if (absl::Status s = p.Validate(); !s.ok()) {
      return absl::InvalidArgumentError("invalid problem (" + flag + "): " + std::string(s.message()));
    }
    // The tuner lays out one page per page of every sequence (the shared prefix once): a
    // smaller pool would make sequences alias each other's pages and time a cache smaller
    // than the one named. A caller's own table may share pages; the flags may not.
    if (p.is_paged() && p.kv_pool_pages != 0 && p.kv_pool_pages < p.PagesNeeded()) {
      return absl::InvalidArgumentError("--pool-pages " + std::to_string(p.kv_pool_pages) + " (" + flag +
                                        "): the sequences need " + std::to_string(p.PagesNeeded()) + " pages");
    }
    out.push_back(std::move(p));
    return absl::OkStatus();
  };
  for (size_t i = 0; i < seq.size(); ++i) {
    AttentionProblem p = *base;
    if (p.kind == ProblemKind::kPrefill) p.q_len = seq[i];
    p.kv_len = kv_seq.empty() ? seq[i] : (kv_seq.size() == 1 ? kv_seq[0] : kv_seq[i]);
    if (absl::Status s = add(p, "--seq " + std::to_string(seq[i])); !s.ok()) return s;
  }
  for (int len : cache_len) {
    AttentionProblem p = *base;
    p.kv_len = len;
    if (absl::Status s = add(p, "--cache-len " + std::to_string(len)); !s.ok()) return s;
  }
  if (!cache_lens.empty()) {
    AttentionProblem p = *base;
    p.batch = static_cast<int>(cache_lens.size());
    p.kv_len = *std::max_element(cache_lens.begin(), cache_lens.end());
    p.kv_valid_lens.assign(cache_lens.begin(), cache_lens.end());
    if (absl::Status s = add(p, "--cache-lens"); !s.ok()) return s;
  }
  return out;
}

absl::StatusOr<std::vector<Variant>> ParseVariants(const std::vector<std::string>& names) {
  std::vector<Variant> out;
  for (const std::string& n : names) {
    absl::StatusOr<Variant> v = ParseVariant(n);
    if (!v.ok()) return absl::InvalidArgumentError(std::string("--variants: ") + std::string(v.status().message()));
    out.push_back(*v);
  }
  return out;
}

absl::StatusOr<std::vector<Precision>> ParsePrecisions(const std::vector<std::string>& names) {
  std::vector<Precision> out;
  for (const std::string& n : names) {
    absl::StatusOr<Precision> p = ParsePrecision(n);
    if (!p.ok()) return absl::InvalidArgumentError(std::string("--precisions: ") + std::string(p.status().message()));
    out.push_back(*p);
  }
  return out;
}

CLI::Option* AddDatabaseOption(CLI::App* command, std::string* path, const std::string& description) {
  // Every --db takes either form; Store::Open tells them apart (IsPostgresUrl).
  return command->add_option("--db", *path, description + "; or a postgresql:// URL")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](const std::string& value) { return value.empty() ? std::string("must not be empty") : std::string(); },
          "FILE|URL", "non-empty path"));
}

namespace {

absl::Status MissingDatabase(const std::string& path, const absl::Status& status) {
  return absl::NotFoundError(std::string(status.message()) + " (run 'fusetune sweep --db " + RedactDatabaseUrl(path) +
                             "' first, or check the path)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenExistingStore(const std::string& path) {
  StoreOptions options;
  options.access = StoreAccess::kReadOnly;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path, options);
  if (absl::IsNotFound(store.status())) return MissingDatabase(path, store.status());
  return store;
}

absl::StatusOr<std::unique_ptr<Store>> OpenExistingStoreForWriting(const std::string& path) {
  std::error_code ec;
  if (!IsPostgresUrl(path) && !std::filesystem::exists(path, ec) && !ec) {
    return MissingDatabase(path, absl::NotFoundError("no database at " + path));
  }
  return Store::Open(path);
}

void AddSpaceFilterOptions(CLI::App* command, std::vector<std::string>* variants,
                           std::vector<std::string>* precisions) {
  command->add_option("--variants", *variants, "comma-separated: fused, partial, materialized (default all)")
      ->delimiter(',');
  command->add_option("--precisions", *precisions, "comma-separated: fp32, tf32, fp16, bf16 (default: every one the backend runs for the dtype)")
      ->delimiter(',');
}

absl::StatusOr<ConfigSpaceOptions> ParseSpaceFilters(const std::vector<std::string>& variants,
                                                     const std::vector<std::string>& precisions) {
  ConfigSpaceOptions space;
  absl::StatusOr<std::vector<Variant>> v = ParseVariants(variants);
  if (!v.ok()) return v.status();
  absl::StatusOr<std::vector<Precision>> p = ParsePrecisions(precisions);
  if (!p.ok()) return p.status();
  space.variants = *std::move(v);
  space.precisions = *std::move(p);
  return space;
}

absl::Status CheckSpaces(const std::vector<AttentionProblem>& problems, const Backend& backend,
                         const ConfigSpaceOptions& space) {
  for (const AttentionProblem& p : problems) {
    absl::StatusOr<ConfigSpace> s = ConfigSpace::Create(p, backend, space);
    if (!s.ok()) return s.status();
  }
  return absl::OkStatus();
}

void AddBackendOptions(CLI::App* command, std::string* name, int* device) {
  command->add_option("--backend", *name, "cpu, cuda or hip (as compiled in)")->capture_default_str();
  command->add_option("--device", *device, "device index")->capture_default_str()->check(CLI::NonNegativeNumber);
}

std::unique_ptr<Backend> CreateLocalBackend(const std::string& command, const std::string& name, int device,
                                            int* exit_code) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBackend(name, device);
  if (backend.ok()) return *std::move(backend);
  const std::string message(backend.status().message());
  *exit_code = absl::IsNotFound(backend.status()) || absl::IsInvalidArgument(backend.status())
                   ? UsageError(command, message)
                   : Failure(command, message);
  return nullptr;
}

int UsageError(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "fusetune %s: %s\nRun 'fusetune %s --help' for the options.\n", command.c_str(),
               message.c_str(), command.c_str());
  return kExitUsage;
}

int Failure(const std::string& command, const std::string& message) { return Failure(command, message, kExitFailure); }

int Failure(const std::string& command, const std::string& message, int exit_code) {
  std::fprintf(stderr, "fusetune %s: %s\n", command.c_str(), message.c_str());
  return exit_code;
}

}  // namespace fusetune::cli
