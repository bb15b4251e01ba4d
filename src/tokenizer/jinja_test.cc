#include "tokenizer/jinja.h"

#include <gtest/gtest.h>

#include "tokenizer/chat_template.h"
#include "util/error.h"

namespace deltafin::jinja {
namespace {

std::string render(std::string_view src, const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  Template t(src, "t");
  Value v = Value::from_json(vars);
  return t.render(v.dict());
}

std::string error_of(std::string_view src, const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  try {
    render(src, vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Jinja, OutputAndWhitespaceControl) {
  EXPECT_EQ(render("a {{ 1 + 2 }} b"), "a 3 b");
  EXPECT_EQ(render("a  {{- 'x' -}}  b"), "axb");
  // trim_blocks + lstrip_blocks, as transformers renders.
  EXPECT_EQ(render("x\n  {% if true %}\ny\n  {% endif %}\nz"), "x\ny\nz");
  // One trailing newline of the template is dropped.
  EXPECT_EQ(render("hi\n"), "hi");
  EXPECT_EQ(render("a{# comment #}b"), "ab");
  EXPECT_EQ(render("{% raw %}{{ not parsed }}{% endraw %}"), "{{ not parsed }}");
}

TEST(Jinja, PythonValueSemantics) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.0 }}"), "3 -4 2 3.5 1024 1.0");
  EXPECT_EQ(render("{{ none }} {{ true }} {{ [1, 'a'] }} {{ {'k': none} }}"), "None True [1, 'a'] {'k': None}");
  EXPECT_EQ(render("{{ 'abc'[::-1] }} {{ [1,2,3,4][1:3] }} {{ 'héllo'[1] }} {{ [1,2,3][-1] }}"), "cba [2, 3] é 3");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }}"), "a1None");
  EXPECT_EQ(render("{{ 'x' if 0 else 'y' }}{{ 'z' if 1 }}"), "yz");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"), "True True True True");
  EXPECT_EQ(render("{{ (1 == 1.0) and 'ok' }} {{ [] or 'empty' }}"), "ok empty");
}

TEST(Jinja, LoopsNamespacesAndMacros) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
                   {{"xs", {"a", "b", "c"}}}),
            "1a,2b,3c");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in range(10) if x is odd %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "135");
  EXPECT_EQ(render("{% for k, v in d | dictsort %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"b", 2}, {"a", 1}}}}), "a=1;b=2;");
  // Assignments inside a loop do not leak; namespace attributes do.
  EXPECT_EQ(render("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for i in [1,2,3] %}{% set n = n + i %}"
                   "{% set ns.n = ns.n + i %}{% endfor %}{{ n }} {{ ns.n }}"),
            "0 6");
  EXPECT_EQ(render("{% macro tag(name, cls='c') %}<{{ name }} class={{ cls }}>{% endmacro %}{{ tag('a') }}{{ tag('b', cls='d') }}"),
            "<a class=c><b class=d>");
  EXPECT_EQ(render("{% set x %}inner {{ 1 }}{% endset %}[{{ x }}]"), "[inner 1]");
  EXPECT_EQ(render("{{ loop_messages }}{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
}

TEST(Jinja, MacrosRecurseSeeGlobalsAndChangeNamespaces) {
  EXPECT_EQ(render("{%- macro j(v) -%}{%- if v is mapping -%}{ {%- for k, x in v | dictsort -%}{{ k }}:{{ j(x) }}"
                   "{%- if not loop.last %},{% endif -%}{%- endfor -%} }{%- else -%}{{ v }}{%- endif -%}{%- endmacro -%}"
                   "{{ j(d) }}",
                   {{"d", {{"b", {{"c", 1}}}, {"a", 2}}}}),
            "{a:2,b:{c:1}}");
  EXPECT_EQ(render("{%- macro bump(st, by=1) -%}{%- set st.n = st.n + by -%}{{ flag }}{%- endmacro -%}"
                   "{%- set flag = 'F' -%}{%- set s = namespace(n=0) -%}{{ bump(s) }}{{ bump(s, by=5) }}{{ s.n }}"),
            "FF6");
  EXPECT_EQ(render("{% macro f(p, q) %}{{ p }}{{ q }}{% endmacro %}{{ f(\n  'a',\n  'b' if x else 'c'\n) }}"),
            "ac");
}

TEST(Jinja, FiltersTestsAndMethods) {
  EXPECT_EQ(render("{{ '  x  ' | trim }}|{{ xs | length }}|{{ xs | join('-') }}|{{ xs | first }}{{ xs | last }}",
                   {{"xs", {"a", "b"}}}),
            "x|2|a-b|ab");
  EXPECT_EQ(render("{{ d | tojson }}", {{"d", {{"a", {1, "é\n"}}, {"b", nullptr}}}}), R"({"a": [1, "é\n"], "b": null})");
  EXPECT_EQ(render("{{ d | tojson(indent=2) }}", {{"d", {{"a", {1}}}}}), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ d | tojson(separators=(',', ':')) }}", {{"d", {{"a", 1}, {"b", 2}}}}), R"({"a":1,"b":2})");
  EXPECT_EQ(render("{{ undefined_thing | default('dflt') }} {{ '' | default('e', true) }}"), "dflt e");
  EXPECT_EQ(render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | join(',') }}",
                   {{"ms", {{{"role", "user"}, {"c", "1"}}, {{"role", "bot"}, {"c", "2"}}, {{"role", "user"}, {"c", "3"}}}}}),
            "1,3");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'xxhixx'.strip('x') }} {{ '\\n\\nhi'.lstrip('\\n') }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] hi hi");
  EXPECT_EQ(render("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'hello world'.title() }}"
                   " {{ 'a-b'.replace('-', '+') }} {{ '{} and {}'.format(1, 'x') }}"),
            "True True Hello World a+b 1 and x");
  EXPECT_EQ(render("{{ d.get('a') }} {{ d.get('z', 'none') }} {% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}",
                   {{"d", {{"a", 1}}}}),
            "1 none a1");
  EXPECT_EQ(render("{{ x is defined }} {{ y is not defined }} {{ none is none }} {{ 's' is string }} {{ d is mapping }}"
                   " {{ 3 is divisibleby 3 }}",
                   {{"x", 1}, {"d", nlohmann::ordered_json::object()}}),
            "True True True True True True");
}

TEST(Jinja, ErrorsNameTheConstructAndLine) {
  EXPECT_NE(error_of("line one\n{{ x | frobnicate }}").find("t line 2: unsupported filter 'frobnicate'"), std::string::npos);
  EXPECT_NE(error_of("{% include 'other.jinja' %}").find("unsupported statement {% include %}"), std::string::npos);
  EXPECT_NE(error_of("{% if x %}never closed").find("missing {% endif %}"), std::string::npos);
  EXPECT_NE(error_of("a\nb\n{{ raise_exception('roles must alternate') }}").find("t line 3: the chat template raised an error: roles must alternate"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("unsupported operand types for +: str and int"), std::string::npos);
  EXPECT_NE(error_of("{{ x is frob }}").find("unsupported test 'frob'"), std::string::npos);
  EXPECT_NE(error_of("{{ later() }}{% macro later() %}{% endmacro %}").find("'later' is undefined"), std::string::npos);
}

TEST(ChatTemplate, RendersMessagesToolsAndExtraVariables) {
  tokenizer::ChatTemplate ct(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if tools %}[{{ tools | length }} tools]{% endif %}"
      "{% if add_generation_prompt %}<assistant>{% if enable_thinking is false %}<nothink>{% endif %}{% endif %}",
      "<s>", "</s>");
  nlohmann::ordered_json msgs = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(ct.render(msgs, false), "<s><user>hi");
  EXPECT_EQ(ct.render(msgs, true, nlohmann::ordered_json::array({{{"name", "f"}}}), {{"enable_thinking", false}}),
            "<s><user>hi[1 tools]<assistant><nothink>");
  EXPECT_THROW(ct.render(nlohmann::ordered_json::object(), true), Error);
}

}  // namespace
}  // namespace deltafin::jinja
