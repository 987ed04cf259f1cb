#include "route.h"

#include <gtest/gtest.h>

namespace squall {
namespace {

Route ok(const char* url) {
  auto parsed = parseRoute(url);
  auto* route = std::get_if<Route>(&parsed);
  EXPECT_NE(route, nullptr) << url << ": " << std::get<RouteError>(parsed).message;
  return route ? *route : Route{Route::Kind::PAGE};
}

RouteError bad(const char* url) {
  auto parsed = parseRoute(url);
  auto* error = std::get_if<RouteError>(&parsed);
  EXPECT_NE(error, nullptr) << url << " was accepted";
  return error ? *error : RouteError{0, ""};
}

TEST(RouteTest, PagesOfTheAppAreOneHtmlPage) {
  EXPECT_EQ(ok("/").kind, Route::Kind::PAGE);
  EXPECT_EQ(ok("/sessions/3").kind, Route::Kind::PAGE);
  auto task = ok("/sessions/3/tasks/17");
  EXPECT_EQ(task.kind, Route::Kind::PAGE);
  EXPECT_EQ(task.session, 3u);
  EXPECT_EQ(task.task, 17u);
  EXPECT_EQ(ok("/assets/app.js?v=2").asset, "app.js");
}

TEST(RouteTest, ApiPathsCarryTheirIds) {
  EXPECT_EQ(ok("/api/overview").kind, Route::Kind::OVERVIEW);
  EXPECT_EQ(ok("/api/governors").kind, Route::Kind::GOVERNORS);
  EXPECT_EQ(ok("/api/sessions").kind, Route::Kind::SESSIONS);
  EXPECT_EQ(ok("/metrics").kind, Route::Kind::METRICS);
  auto session = ok("/api/sessions/12");
  EXPECT_EQ(session.kind, Route::Kind::SESSION);
  EXPECT_EQ(session.session, 12u);
  auto task = ok("/api/sessions/12/tasks/99");
  EXPECT_EQ(task.kind, Route::Kind::TASK);
  EXPECT_EQ(task.task, 99u);
  EXPECT_EQ(ok("/api/sessions/12/graph").kind, Route::Kind::GRAPH);
  EXPECT_EQ(ok("/api/sessions/12/timeline").kind, Route::Kind::TIMELINE);
  EXPECT_EQ(ok("/api/events").session, 0u);
  EXPECT_EQ(ok("/api/events?session=4").session, 4u);
}

TEST(RouteTest, TaskQueryParsesStatesNamePaging) {
  auto route = ok("/api/sessions/1/tasks?state=failed,running&name=count%5B2&offset=100&limit=25");
  EXPECT_EQ(route.kind, Route::Kind::TASKS);
  ASSERT_EQ(route.query.states.size(), 2u);
  EXPECT_EQ(route.query.states[0], TaskNode::State::FAILED);
  EXPECT_EQ(route.query.states[1], TaskNode::State::ASSIGNED);
  EXPECT_EQ(route.query.name, "count[2");
  EXPECT_EQ(route.query.offset, 100u);
  EXPECT_EQ(route.query.limit, 25u);
  auto defaults = ok("/api/sessions/1/tasks");
  EXPECT_TRUE(defaults.query.states.empty());
  EXPECT_EQ(defaults.query.limit, 50u);
}

TEST(RouteTest, BadParametersAre400) {
  EXPECT_EQ(bad("/api/sessions/abc").status, 400u);
  EXPECT_EQ(bad("/api/sessions/0").status, 400u);
  EXPECT_EQ(bad("/api/sessions/-1").status, 400u);
  EXPECT_EQ(bad("/api/sessions/99999999999999999999").status, 400u);
  EXPECT_EQ(bad("/api/sessions/1/tasks/x").status, 400u);
  EXPECT_EQ(bad("/sessions/x").status, 400u);
  auto state = bad("/api/sessions/1/tasks?state=exploded");
  EXPECT_EQ(state.status, 400u);
  EXPECT_NE(state.message.find("exploded"), std::string::npos);
  EXPECT_EQ(bad("/api/sessions/1/tasks?limit=0").status, 400u);
  EXPECT_EQ(bad("/api/sessions/1/tasks?limit=501").status, 400u);
  EXPECT_EQ(bad("/api/sessions/1/tasks?offset=x").status, 400u);
  EXPECT_EQ(bad("/api/sessions/1/tasks?colour=red").status, 400u);
  EXPECT_EQ(bad("/api/overview?x=1").status, 400u);
  EXPECT_EQ(bad("/api/events?session=abc").status, 400u);
  EXPECT_EQ(bad("/api/events?session").status, 400u);
  EXPECT_EQ(bad("no-slash").status, 400u);
  EXPECT_EQ(bad(("/api/sessions/1/tasks?name=" + std::string(300, 'a')).c_str()).status, 400u);
}

TEST(RouteTest, UnknownPathsAre404) {
  EXPECT_EQ(bad("/nope").status, 404u);
  EXPECT_EQ(bad("/api").status, 404u);
  EXPECT_EQ(bad("/api/nope").status, 404u);
  EXPECT_EQ(bad("/api/sessions/1/nope").status, 404u);
  EXPECT_EQ(bad("/api/sessions/1/tasks/2/3").status, 404u);
  EXPECT_EQ(bad("/metrics/x").status, 404u);
  EXPECT_EQ(bad("/sessions/1/objects/2").status, 404u);
}

}  // namespace
}  // namespace squall
