// The snapshot store's pieces that need no store (s3_store.h,
// catalog_store.cpp): which --snapshot-store URLs are taken, the keys they
// give, an imported sandbox's rows in one transaction, and the erasures a
// destroy leaves for the store, kept across a reopen.
#include "temp_dir.h"
#include "persistence/catalog.h"
#include "persistence/s3_store.h"

#include <catch2/catch.hpp>

namespace fs = std::filesystem;
using namespace agentbox::persistence;

TEST_CASE("--snapshot-store takes s3://bucket/prefix and nothing that could leave the prefix") {
  StoreLocation where;
  CHECK(parse_store_url("s3://my-bucket/team/one/", where).empty());
  CHECK(where.bucket == "my-bucket");
  CHECK(where.prefix == "team/one/");
  CHECK(parse_store_url("s3://my-bucket", where).empty());
  CHECK(where.prefix.empty());
  for (const char* bad : {"http://b/p", "s3://", "s3://B/p", "s3://ab/p", "s3://bucket/../p", "s3://bucket/a/./b",
                          "s3://bucket/a b", "s3://bucket/a?x", "s3://bucket//a", "s3://bucket/a%2F"}) {
    INFO(bad);
    CHECK_FALSE(parse_store_url(bad, where).empty());
  }
  fs::path dir = test::fresh_temp_dir("store_catalog", "keys");
  StateLayout layout{dir};
  Catalog catalog(dir / "c.db");
  REQUIRE(parse_store_url("s3://bucket/p", where).empty());
  RemoteStore store(where, layout, catalog);
  // The conversation id never reaches a key: it is hashed.
  CHECK(store.manifest_key("../../x y").rfind("p/conversations/", 0) == 0);
  CHECK(store.manifest_key("../../x y").find("..") == std::string::npos);
  CHECK(store.manifest_key("a") == "p/conversations/ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb.json");
  CHECK(store.object_key("0123456789ab", "snap-1.tar.zst") == "p/sandboxes/0123456789ab/snap-1.tar.zst");
  fs::remove_all(dir);
}

TEST_CASE("an imported sandbox is recorded whole or not at all; erasures outlive a reopen") {
  fs::path dir = test::fresh_temp_dir("store_catalog", "import");
  {
    Catalog c(dir / "c.db");
    SnapshotRecord base;
    base.id = "snap-000000000001";
    base.sandbox = "0123456789ab";
    base.created_at = "2026-12-07T00:00:00.000Z";
    base.digest = "sha256:00";
    base.path = "snapshots/0123456789ab/snap-000000000001.tar.zst";
    base.reason = "idle";
    base.complete = true;
    SnapshotRecord child = base;
    child.id = "snap-000000000002";
    child.parent = base.id;
    child.created_at = "2026-12-07T00:00:01.000Z";
    CHECK(c.add_imported("conv", "0123456789ab", SandboxState::Stopped, {base, child}, {{"default", "/workspace/p", "x"}}));
    // Neither the conversation nor the sandbox id twice.
    CHECK_FALSE(c.add_imported("conv", "0123456789ac", SandboxState::Stopped, {}, {}));
    CHECK_FALSE(c.add_imported("other", "0123456789ab", SandboxState::Stopped, {}, {}));
    auto record = c.find_by_conversation("conv");
    REQUIRE(record);
    CHECK(record->state == SandboxState::Stopped);
    CHECK(c.latest_snapshot(record->id)->id == child.id);
    CHECK(c.chain(child).size() == 2);
    REQUIRE(c.sessions(record->id).size() == 1);
    CHECK(c.sessions(record->id)[0].cwd == "/workspace/p");
    CHECK_FALSE(c.find_by_conversation("other"));
    c.add_store_erasure("gone", "aaaaaaaaaaaa");
    c.add_store_erasure("gone", "aaaaaaaaaaaa");  // once
    c.add_store_erasure("gone2", "bbbbbbbbbbbb");
  }
  Catalog c(dir / "c.db");
  CHECK(c.store_erasures().size() == 2);
  c.remove_store_erasure("gone", "aaaaaaaaaaaa");
  REQUIRE(c.store_erasures().size() == 1);
  CHECK(c.store_erasures()[0].first == "gone2");
  fs::remove_all(dir);
}
