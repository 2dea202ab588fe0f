#include "router/generation_input.h"

#include <gtest/gtest.h>

#include "tests/unit/router/router_test_model.h"

namespace dq::router {
namespace {

namespace v1 = dqserve::v1;

class GenerationFromProtoTest : public ::testing::Test {
 protected:
  GenerationFromProtoTest() : model_(TestModel(64)) {
    options_.served_models = {"tiny"};
    options_.vocab_size = model_.vocab_size;
  }
  ServedModel model_;
  ParseOptions options_;
};

TEST_F(GenerationFromProtoTest, ChatIsRenderedWithTheTemplateLikeTheHttpApi) {
  v1::GenerateRequest r;
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Hi!");
  r.mutable_chat()->set_add_generation_prompt(true);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_max_tokens(5);
  ApiResult<GenerationInput> in = GenerationFromProto(r, model_, options_);
  ASSERT_TRUE(in.ok()) << in.error().message;
  const std::vector<ChatMessage> messages = {ChatMessage{"user", "Hi!"}};
  auto rendered = model_.chat_template->Render(messages, ChatRenderOptions{});
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(in->prompt_ids,
            model_.tokenizer.EncodeSpecialOutside(rendered->text, rendered->content));
  EXPECT_EQ(in->max_tokens, 5);
  EXPECT_FLOAT_EQ(in->sampling.temperature, 0.0f);
  EXPECT_FALSE(in->prompt_logprobs);
}

TEST_F(GenerationFromProtoTest, UnsetMaxTokensMeansTheRestOfTheContext) {
  v1::GenerateRequest r;
  r.set_prompt("one two three");
  ApiResult<GenerationInput> in = GenerationFromProto(r, model_, options_);
  ASSERT_TRUE(in.ok()) << in.error().message;
  EXPECT_EQ(in->max_tokens, 64 - static_cast<int>(in->prompt_ids.size()));
}

TEST_F(GenerationFromProtoTest, TokenIdsSkipTheTokenizerAndLogprobsCarryAlternatives) {
  v1::GenerateRequest r;
  for (int id : {5, 6, 7}) r.mutable_prompt_token_ids()->add_ids(id);
  r.mutable_sampling()->set_logprobs(true);
  r.mutable_sampling()->set_top_logprobs(2);
  r.mutable_sampling()->set_seed(42);
  r.mutable_sampling()->add_stop("\n\n");
  ApiResult<GenerationInput> in = GenerationFromProto(r, model_, options_);
  ASSERT_TRUE(in.ok()) << in.error().message;
  EXPECT_EQ(in->prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_TRUE(in->logprobs);
  EXPECT_EQ(in->top_logprobs, 2);
  EXPECT_EQ(in->sampling.seed, 42u);
  EXPECT_EQ(in->sampling.stop, (std::vector<std::string>{"\n\n"}));
}

TEST_F(GenerationFromProtoTest, RefusesWhatTheHttpApiRefusesNamingTheField) {
  v1::GenerateRequest r;
  r.set_prompt("hi");
  r.mutable_sampling()->set_temperature(3.0f);
  ApiResult<GenerationInput> in = GenerationFromProto(r, model_, options_);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.error().http_status, 400);
  EXPECT_EQ(in.error().param, "temperature");

  r.mutable_sampling()->clear_temperature();
  r.set_model("other");
  in = GenerationFromProto(r, model_, options_);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.error().http_status, 404);

  r.clear_model();
  r.mutable_sampling()->set_max_tokens(1000);  // past the 64-token context
  in = GenerationFromProto(r, model_, options_);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.error().code, "context_length_exceeded");

  v1::GenerateRequest none;
  in = GenerationFromProto(none, model_, options_);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.error().param, "input");
}

TEST(CompletionGenerationTest, EchoWithLogprobsAsksForPromptLogprobs) {
  const ServedModel model = TestModel();
  CompletionRequest c;
  c.prompt = std::vector<int32_t>{1, 2, 3};
  c.sampling.max_tokens = 1;
  c.logprobs = 1;
  c.echo = true;
  ApiResult<GenerationInput> in = CompletionGeneration(c, model);
  ASSERT_TRUE(in.ok());
  EXPECT_TRUE(in->prompt_logprobs);
  EXPECT_EQ(in->top_logprobs, 1);
  c.logprobs.reset();
  in = CompletionGeneration(c, model);
  ASSERT_TRUE(in.ok());
  EXPECT_FALSE(in->prompt_logprobs);
}

TEST(ChatGenerationTest, AModelWithoutAChatTemplateRefusesChat) {
  ServedModel model = TestModel();
  model.chat_template.reset();
  ChatCompletionRequest c;
  c.messages = {ChatMessage{"user", "hi"}};
  ApiResult<GenerationInput> in = ChatGeneration(c, model);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.error().param, "messages");
  EXPECT_NE(in.error().message.find("/v1/completions"), std::string::npos);
}

}  // namespace
}  // namespace dq::router
