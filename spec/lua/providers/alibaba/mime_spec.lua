-- MIME multi-part user data (providers/alibaba/mime.lua): parsing, the stage=pre ordering and the
-- merge with the bootstrap script, byte for byte.
local mime = require "providers.alibaba.mime"

local BOOTSTRAP = "#!/bin/bash\necho 'start ack'\n"

-- The user's document: three parts, each body followed by a blank line before the next delimiter.
local function user_doc(parts)
  local out = { "MIME-Version: 1.0", 'Content-Type: multipart/mixed; boundary="//"', "" }
  for _, p in ipairs(parts) do
    table.move({ "--//", "Content-Type: " .. p[1], "", p[2], "" }, 1, 5, #out + 1, out)
  end
  out[#out + 1] = "--//--\n"
  return table.concat(out, "\n")
end

local USER = user_doc {
  { 'text/cloud-config; charset="us-ascii"', "fqdn: my-instance.localdomain" },
  { "text/x-shellscript; stage=pre", "#!/bin/bash\necho 'pre-script'" },
  { "text/x-shellscript", "#!/bin/bash\necho 'http://localhost'" },
}

local MERGED = table.concat({
  "MIME-Version: 1.0",
  'Content-Type: multipart/mixed; boundary="//"',
  "",
  "--//",
  "Content-Type: text/x-shellscript; stage=pre",
  "",
  "#!/bin/bash",
  "echo 'pre-script'",
  "",
  "--//",
  'Content-Type: text/x-shellscript; charset="us-ascii"',
  "",
  "#!/bin/bash",
  "echo 'start ack'",
  "",
  "--//",
  'Content-Type: text/cloud-config; charset="us-ascii"',
  "",
  "fqdn: my-instance.localdomain",
  "",
  "--//",
  "Content-Type: text/x-shellscript",
  "",
  "#!/bin/bash",
  "echo 'http://localhost'",
  "",
  "--//--",
  "",
}, "\n")

describe("alibaba mime", function()
  it("merges the bootstrap part into the user's parts, stage=pre first", function()
    assert.equals(MERGED, assert(mime.merge(BOOTSTRAP, USER)))
  end)

  it("drops every carriage return (CRLF documents give the same result)", function()
    assert.equals(MERGED, assert(mime.merge(BOOTSTRAP, (USER:gsub("\n", "\r\n")))))
  end)

  it("parses parts with their Content-Type verbatim and the delimiter's line break excluded", function()
    local parts = assert(mime.parse(USER))
    assert.same({
      { content_type = 'text/cloud-config; charset="us-ascii"', content = "fqdn: my-instance.localdomain\n" },
      { content_type = "text/x-shellscript; stage=pre", content = "#!/bin/bash\necho 'pre-script'\n" },
      { content_type = "text/x-shellscript", content = "#!/bin/bash\necho 'http://localhost'\n" },
    }, parts)
  end)

  it("takes the boundary from the header, quoted or not, and ignores preamble and epilogue", function()
    local doc = "Content-Type: multipart/mixed; boundary=abc\nMIME-Version: 1.0\n\npreamble\n--abc\n"
      .. "Content-Type: text/plain\n\nhello\n--abc--\nepilogue\n"
    assert.same({ { content_type = "text/plain", content = "hello" } }, assert(mime.parse(doc)))
  end)

  it("gives a part without headers the type text/plain", function()
    local doc = 'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="b"\n\n--b\n\nplain\n--b--\n'
    assert.same({ { content_type = "text/plain", content = "plain" } }, assert(mime.parse(doc)))
  end)

  describe("refuses", function()
    local function refused(doc, pattern)
      local parts, err = mime.parse(doc)
      assert.is_nil(parts)
      assert.matches(pattern, err)
    end

    it("a header block that is not headers", function()
      refused("MIME-Version: 1.0\nInvalid-Content", "MIME user data")
      local merged, err = mime.merge(BOOTSTRAP, "MIME-Version: 1.0\nInvalid-Content")
      assert.is_nil(merged)
      assert.is_string(err)
    end)

    it("a document that is not multipart or has no boundary", function()
      refused("MIME-Version: 1.0\n\nbody\n", "no Content%-Type")
      refused("Content-Type: text/plain\n\nbody\n", "not multipart")
      refused("Content-Type: multipart/mixed\n\n--x\n\nbody\n--x--\n", "no boundary")
    end)

    it("a missing closing boundary or no part at all", function()
      refused('Content-Type: multipart/mixed; boundary="b"\n\n--b\n\nbody\n', "closing boundary")
      refused('Content-Type: multipart/mixed; boundary="b"\n\njust text\n', "no part starts")
    end)

    it("a part in base64 (it would be written back without its encoding)", function()
      refused('Content-Type: multipart/mixed; boundary="b"\n\n--b\nContent-Type: text/x-shellscript\n'
        .. "Content-Transfer-Encoding: base64\n\nIyEvYmluL2Jhc2gK\n--b--\n", "base64")
    end)

    it("a part whose header lines are broken", function()
      refused('Content-Type: multipart/mixed; boundary="b"\n\n--b\nnot a header\n\nbody\n--b--\n', "MIME part 1")
    end)
  end)

  it("refuses to serialize content holding the output boundary", function()
    local text, err = mime.serialize({ { content_type = "text/plain", content = "a\n--//\nb" } })
    assert.is_nil(text)
    assert.matches("boundary", err)
  end)

  it("orders stage=pre shell scripts first, the rest after, each in its order", function()
    local normal = { content_type = "text/x-shellscript", content = "normal" }
    local pre1 = { content_type = "text/x-shellscript; stage=pre", content = "pre1" }
    local other = { content_type = "text/plain", content = "other" }
    local pre2 = { content_type = 'text/x-shellscript; charset="us-ascii"; stage="pre"', content = "pre2" }
    local invalid = { content_type = "not a media type; stage=pre", content = "invalid" }
    assert.same({ pre1, pre2, normal, other }, mime.order({ normal, pre1, other, pre2 }))
    assert.same({ pre1, invalid, other }, mime.order({ invalid, pre1, other }))
  end)

  it("recognises MIME user data by its first header", function()
    assert.is_true(mime.is_mime("  MIME-Version: 1.0\n"))
    assert.is_true(mime.is_mime("content-type: multipart/mixed; boundary=x\n"))
    assert.is_false(mime.is_mime("#!/bin/bash\necho hi\n"))
    assert.is_false(mime.is_mime(nil))
  end)
end)
