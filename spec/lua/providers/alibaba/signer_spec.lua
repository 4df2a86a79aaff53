-- Alibaba OpenAPI signer: the official vectors from Alibaba's docs and SDK tests, then vectors
-- computed independently with the openssl command line from canonical strings written out by hand
-- (never by this module), then misuse.
--
-- Re-running the independent vectors (bash, OpenSSL 3):
--   enc2() { sed 's/%/%25/g; s/=/%3D/g; s/&/%26/g'; }     # V2's second encoding of a canonical query
--   v2() { printf '%s' "$1" | openssl dgst -sha1 -hmac "$2" -binary | base64; }   # $1 StringToSign, $2 key
--   v3() { local h; h=$(printf '%s' "$1" | openssl dgst -sha256 -r | cut -d' ' -f1); echo "$h"
--          printf 'ACS3-HMAC-SHA256\n%s' "$h" | openssl dgst -sha256 -hmac "$2" -r | cut -d' ' -f1; }
--   E=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855   # SHA-256 of the empty body
-- enc2 is a complete second-pass encoder here because an encoded canonical query holds only
-- unreserved characters, "%", "=" and "&". Both helpers reproduce the official vectors V2-A and V3-A
-- below, which checks the helpers themselves. UTF-8 bytes by hand: printf '中文' | od -An -tx1
-- gives e4 b8 ad e6 96 87.
local signer = require "providers.alibaba.signer"
local crypto = require("luaprov").crypto

local EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
local CHINESE = "\u{4E2D}\u{6587}" -- 中文

-- The common RPC parameters of the independent V2 vectors; `extra` adds to or overrides them.
local function rpc_params(extra)
  local p = {
    AccessKeyId = "testid", Format = "JSON", SignatureMethod = "HMAC-SHA1", SignatureVersion = "1.0",
    Timestamp = "2024-01-02T03:04:05Z", Version = "2014-05-26",
  }
  for k, v in pairs(extra) do p[k] = v end
  return p
end

local function lines(t)
  return table.concat(t, "\n")
end

-- Runs f, expects it to raise, and returns the message.
local function raises(f)
  local ok, err = pcall(f)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

describe("alibaba signer", function()
  describe("percent_encode", function()
    it("matches the official Java SDK vector (AcsURLEncoderTest)", function()
      assert.equals("123abc%21%40%23%24%25%5E%26%2A%28%29-%3D_%2B%20~%7C%5C%2F",
        signer.percent_encode("123abc!@#$%^&*()-=_+ ~|\\/"))
    end)

    it("matches the official Go SDK vector (GetEncodeParam)", function()
      assert.equals("a%2Fb%2Fc%2F%20test", signer.percent_encode("a/b/c/ test"))
    end)

    it("encodes UTF-8 byte by byte with uppercase hex", function()
      assert.equals("%E4%B8%AD%E6%96%87", signer.percent_encode(CHINESE))
      assert.equals("%00%FF", signer.percent_encode("\0\255"))
    end)

    it("puts a base64 signature into a URL as the docs show (+ / = escaped)", function()
      assert.equals("9NaGiOspFP5UPcwX8Iwt2YJXXuk%3D", signer.percent_encode("9NaGiOspFP5UPcwX8Iwt2YJXXuk="))
      assert.equals("OLeaidS1JvxuMvnyHOwuJ%2BuX5qY%3D", signer.percent_encode("OLeaidS1JvxuMvnyHOwuJ+uX5qY="))
    end)
  end)

  describe("canonical_query", function()
    it("is empty for no parameters", function()
      assert.equals("", signer.canonical_query({}))
    end)

    it("sorts Tag.10 before Tag.2 (byte order) and writes an empty value as key=", function()
      assert.equals("Tag.1.Key=a&Tag.10.Key=c&Tag.2.Key=b&X=",
        signer.canonical_query({ ["Tag.2.Key"] = "b", ["Tag.10.Key"] = "c", ["Tag.1.Key"] = "a", X = "" }))
    end)

    -- The SDKs (Go openapi-util's Sorter, Go url.Values.Encode, Python sorted()) sort the raw names
    -- and encode afterwards. For names made of unreserved characters (every real parameter name)
    -- that is the same order as sorting encoded names; this pins the choice for the rest.
    it("sorts by the raw bytes of the names, not by their encoded form", function()
      assert.equals("z=1&%C3%A9=2", signer.canonical_query({ z = "1", ["\u{E9}"] = "2" }))
    end)
  end)

  describe("rpc_signature: official vectors", function()
    it("V2-A: DescribeDedicatedHosts from the current V2 doc", function()
      local params = {
        AccessKeyId = "testid", Action = "DescribeDedicatedHosts", Format = "JSON", RegionId = "cn-beijing",
        SignatureMethod = "HMAC-SHA1", SignatureNonce = "edb2b34af0af9a6d14deaf7c1a5315eb",
        SignatureVersion = "1.0", Timestamp = "2023-03-13T08:34:30Z", Version = "2014-05-26",
      }
      assert.equals("AccessKeyId=testid&Action=DescribeDedicatedHosts&Format=JSON&RegionId=cn-beijing"
        .. "&SignatureMethod=HMAC-SHA1&SignatureNonce=edb2b34af0af9a6d14deaf7c1a5315eb&SignatureVersion=1.0"
        .. "&Timestamp=2023-03-13T08%3A34%3A30Z&Version=2014-05-26", signer.canonical_query(params))
      local sig, sts = signer.rpc_signature("GET", params, "testsecret")
      assert.equals("GET&%2F&AccessKeyId%3Dtestid%26Action%3DDescribeDedicatedHosts%26Format%3DJSON"
        .. "%26RegionId%3Dcn-beijing%26SignatureMethod%3DHMAC-SHA1"
        .. "%26SignatureNonce%3Dedb2b34af0af9a6d14deaf7c1a5315eb%26SignatureVersion%3D1.0"
        .. "%26Timestamp%3D2023-03-13T08%253A34%253A30Z%26Version%3D2014-05-26", sts)
      assert.equals("9NaGiOspFP5UPcwX8Iwt2YJXXuk=", sig)
    end)

    local classic = {
      AccessKeyId = "testid", Action = "DescribeRegions", Format = "XML", SignatureMethod = "HMAC-SHA1",
      SignatureNonce = "3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf", SignatureVersion = "1.0",
      Timestamp = "2016-02-23T12:46:24Z", Version = "2014-05-26",
    }

    it("V2-B: DescribeRegions from the classic ECS doc", function()
      local sig, sts = signer.rpc_signature("GET", classic, "testsecret")
      assert.equals("GET&%2F&AccessKeyId%3Dtestid%26Action%3DDescribeRegions%26Format%3DXML"
        .. "%26SignatureMethod%3DHMAC-SHA1%26SignatureNonce%3D3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf"
        .. "%26SignatureVersion%3D1.0%26Timestamp%3D2016-02-23T12%253A46%253A24Z%26Version%3D2014-05-26", sts)
      assert.equals("OLeaidS1JvxuMvnyHOwuJ+uX5qY=", sig)
    end)

    it("V2-B': the same with the key spelled TimeStamp signs differently", function()
      local params = {}
      for k, v in pairs(classic) do params[k] = v end
      params.TimeStamp, params.Timestamp = params.Timestamp, nil
      assert.equals("CT9X0VtwR86fNWSnsc6v8YGOjuE=", (signer.rpc_signature("GET", params, "testsecret")))
    end)
  end)

  describe("rpc_signature: independent vectors", function()
    it("escapes space, *, ~, / and UTF-8 in values, and encodes the result twice", function()
      -- CQS='AccessKeyId=testid&Action=DescribeInstances&Format=JSON'
      -- CQS+='&InstanceName=web%2001%2A~%2F%E4%B8%AD%E6%96%87&RegionId=cn-hangzhou&SignatureMethod=HMAC-SHA1'
      -- CQS+='&SignatureNonce=nonce-1&SignatureVersion=1.0&Timestamp=2024-01-02T03%3A04%3A05Z&Version=2014-05-26'
      -- STS="GET&%2F&$(printf '%s' "$CQS" | enc2)"; v2 "$STS" 'testsecret&'   -> r1OlsXcBhqIdH+OfgevuvzNawQ8=
      local params = rpc_params({ Action = "DescribeInstances", RegionId = "cn-hangzhou", SignatureNonce = "nonce-1",
        InstanceName = "web 01*~/" .. CHINESE })
      local sig, sts = signer.rpc_signature("GET", params, "testsecret")
      assert.equals("GET&%2F&AccessKeyId%3Dtestid%26Action%3DDescribeInstances%26Format%3DJSON"
        .. "%26InstanceName%3Dweb%252001%252A~%252F%25E4%25B8%25AD%25E6%2596%2587%26RegionId%3Dcn-hangzhou"
        .. "%26SignatureMethod%3DHMAC-SHA1%26SignatureNonce%3Dnonce-1%26SignatureVersion%3D1.0"
        .. "%26Timestamp%3D2024-01-02T03%253A04%253A05Z%26Version%3D2014-05-26", sts)
      assert.equals("r1OlsXcBhqIdH+OfgevuvzNawQ8=", sig)
    end)

    it("signs a JSON-array value and Tag.N keys in byte order; an integer is signed as its digits", function()
      -- CQS='AccessKeyId=testid&Action=DescribeInstances&Format=JSON&InstanceIds=%5B%22i-a%22%2C%22i-b%22%5D'
      -- CQS+='&MaxResults=100&RegionId=cn-hangzhou&SignatureMethod=HMAC-SHA1&SignatureNonce=nonce-2'
      -- CQS+='&SignatureVersion=1.0&Tag.1.Key=k8s&Tag.1.Value=a&Tag.10.Key=env&Tag.10.Value=prod'
      -- CQS+='&Tag.2.Key=team&Tag.2.Value=b&Timestamp=2024-01-02T03%3A04%3A05Z&Version=2014-05-26'
      -- STS="GET&%2F&$(printf '%s' "$CQS" | enc2)"; v2 "$STS" 'testsecret&'   -> UUsKidQqPEpvPJiCf8MIE8WEyBE=
      local params = rpc_params({ Action = "DescribeInstances", RegionId = "cn-hangzhou", SignatureNonce = "nonce-2",
        InstanceIds = '["i-a","i-b"]', MaxResults = 100,
        ["Tag.1.Key"] = "k8s", ["Tag.1.Value"] = "a", ["Tag.2.Key"] = "team", ["Tag.2.Value"] = "b",
        ["Tag.10.Key"] = "env", ["Tag.10.Value"] = "prod" })
      local sig, sts = signer.rpc_signature("GET", params, "testsecret")
      assert.equals("GET&%2F&AccessKeyId%3Dtestid%26Action%3DDescribeInstances%26Format%3DJSON"
        .. "%26InstanceIds%3D%255B%2522i-a%2522%252C%2522i-b%2522%255D%26MaxResults%3D100"
        .. "%26RegionId%3Dcn-hangzhou%26SignatureMethod%3DHMAC-SHA1%26SignatureNonce%3Dnonce-2"
        .. "%26SignatureVersion%3D1.0%26Tag.1.Key%3Dk8s%26Tag.1.Value%3Da%26Tag.10.Key%3Denv"
        .. "%26Tag.10.Value%3Dprod%26Tag.2.Key%3Dteam%26Tag.2.Value%3Db"
        .. "%26Timestamp%3D2024-01-02T03%253A04%253A05Z%26Version%3D2014-05-26", sts)
      assert.equals("UUsKidQqPEpvPJiCf8MIE8WEyBE=", sig)
      params.MaxResults = "100"
      assert.equals(sig, (signer.rpc_signature("GET", params, "testsecret")))
    end)

    -- CQS='AccessKeyId=STS.NTest&Action=DescribeRegions&Format=JSON&SecurityToken=CAIS%2Btoken%2Fabc%3D%3D'
    -- CQS+='&SignatureMethod=HMAC-SHA1&SignatureNonce=nonce-3&SignatureVersion=1.0'
    -- CQS+='&Timestamp=2024-01-02T03%3A04%3A05Z&Version=2014-05-26'
    -- v2 "POST&%2F&$(printf '%s' "$CQS" | enc2)" 'stssecret&'   -> IJXC5VeqqSzRQkBlzsupsZ9TIW8=
    -- v2 "GET&%2F&$(printf '%s' "$CQS" | enc2)" 'stssecret&'    -> qHzmPrhvnwyHDyzylnGuJvkFle0=
    local sts_params = rpc_params({ AccessKeyId = "STS.NTest", Action = "DescribeRegions",
      SignatureNonce = "nonce-3", SecurityToken = "CAIS+token/abc==" })

    it("signs an STS SecurityToken like any parameter, and POST differently from GET", function()
      local sig, sts = signer.rpc_signature("POST", sts_params, "stssecret")
      assert.equals("POST&%2F&AccessKeyId%3DSTS.NTest%26Action%3DDescribeRegions%26Format%3DJSON"
        .. "%26SecurityToken%3DCAIS%252Btoken%252Fabc%253D%253D%26SignatureMethod%3DHMAC-SHA1"
        .. "%26SignatureNonce%3Dnonce-3%26SignatureVersion%3D1.0"
        .. "%26Timestamp%3D2024-01-02T03%253A04%253A05Z%26Version%3D2014-05-26", sts)
      assert.equals("IJXC5VeqqSzRQkBlzsupsZ9TIW8=", sig)
      assert.equals("qHzmPrhvnwyHDyzylnGuJvkFle0=", (signer.rpc_signature("GET", sts_params, "stssecret")))
    end)

    it("upper-cases the method, as luaprov.http.request does on the wire", function()
      assert.equals("IJXC5VeqqSzRQkBlzsupsZ9TIW8=", (signer.rpc_signature("post", sts_params, "stssecret")))
    end)

    it("signs an empty value as key= and leaves a Signature entry out", function()
      -- CQS='AccessKeyId=testid&Action=DescribeRegions&Format=JSON&SignatureMethod=HMAC-SHA1'
      -- CQS+='&SignatureNonce=nonce-4&SignatureType=&SignatureVersion=1.0'
      -- CQS+='&Timestamp=2024-01-02T03%3A04%3A05Z&Version=2014-05-26'
      -- v2 "GET&%2F&$(printf '%s' "$CQS" | enc2)" 'testsecret&'   -> lEA800jDuVGAf0bwJoSu2ChUp+Q=
      local params = rpc_params({ Action = "DescribeRegions", SignatureNonce = "nonce-4", SignatureType = "",
        Signature = "left-from-a-previous-attempt" })
      local sig, sts = signer.rpc_signature("GET", params, "testsecret")
      assert.truthy(sts:find("%26SignatureType%3D%26SignatureVersion%3D1.0%26", 1, true))
      assert.is_nil(sts:find("left-from", 1, true))
      assert.equals("lEA800jDuVGAf0bwJoSu2ChUp+Q=", sig)
    end)
  end)

  describe("acs3_authorization: official vector", function()
    it("V3-A: RunInstances with the doc's fixed values", function()
      local req = {
        method = "POST", path = "/",
        query = { ImageId = "win2019_1809_x64_dtc_zh-cn_40G_alibase_20230811.vhd", RegionId = "cn-shanghai" },
        headers = {
          host = "ecs.cn-shanghai.aliyuncs.com", ["x-acs-action"] = "RunInstances",
          ["x-acs-version"] = "2014-05-26", ["x-acs-date"] = "2023-10-26T10:22:32Z",
          ["x-acs-signature-nonce"] = "3156853299f313e23d1673dc12e1703d",
        },
      }
      local auth, canonical = signer.acs3_authorization(req, "YourAccessKeyId", "YourAccessKeySecret")
      assert.equals(lines {
        "POST",
        "/",
        "ImageId=win2019_1809_x64_dtc_zh-cn_40G_alibase_20230811.vhd&RegionId=cn-shanghai",
        "host:ecs.cn-shanghai.aliyuncs.com",
        "x-acs-action:RunInstances",
        "x-acs-content-sha256:" .. EMPTY_SHA256,
        "x-acs-date:2023-10-26T10:22:32Z",
        "x-acs-signature-nonce:3156853299f313e23d1673dc12e1703d",
        "x-acs-version:2014-05-26",
        "",
        "host;x-acs-action;x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version",
        EMPTY_SHA256,
      }, canonical)
      assert.equals("7ea06492da5221eba5297e897ce16e55f964061054b7695beedaac1145b1e259", crypto.sha256_hex(canonical))
      assert.equals("ACS3-HMAC-SHA256 Credential=YourAccessKeyId,SignedHeaders=host;x-acs-action;"
        .. "x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version,"
        .. "Signature=06563a9e1b43f5dfe96b81484da74bceab24a1d853912eee15083a6f0f3283c0", auth)
    end)
  end)

  describe("acs3_authorization: independent vectors", function()
    it("signs a GET with STS headers, empty query and empty body, and fills in x-acs-content-sha256", function()
      -- CR=$(printf 'GET\n/\n\nhost:ecs.cn-hangzhou.aliyuncs.com\nx-acs-accesskey-id:STS.NTest\n'\
      -- 'x-acs-action:DescribeRegions\nx-acs-content-sha256:%s\nx-acs-date:2024-01-02T03:04:05Z\n'\
      -- 'x-acs-security-token:CAIS+token/abc==\nx-acs-signature-nonce:nonce-j1\nx-acs-version:2014-05-26\n\n'\
      -- 'host;x-acs-accesskey-id;x-acs-action;x-acs-content-sha256;x-acs-date;x-acs-security-token;'\
      -- 'x-acs-signature-nonce;x-acs-version\n%s' $E $E)
      -- v3 "$CR" stssecret   -> 25283c19e5cbb9fec06d1cd41a8b6bb276858639f97a058b2c30f63c41166f28
      --                         3a65dbcd02818a3d8838a6973a780d0b3b219f64a8034bd182b5a6cb9b52e701
      local req = {
        method = "GET",
        headers = {
          host = "ecs.cn-hangzhou.aliyuncs.com", ["x-acs-action"] = "DescribeRegions",
          ["x-acs-version"] = "2014-05-26", ["x-acs-date"] = "2024-01-02T03:04:05Z",
          ["x-acs-signature-nonce"] = "nonce-j1", ["x-acs-security-token"] = "CAIS+token/abc==",
          ["x-acs-accesskey-id"] = "STS.NTest",
          accept = "application/json", ["user-agent"] = "luaprov", -- not signed
        },
      }
      local auth, canonical = signer.acs3_authorization(req, "STS.NTest", "stssecret")
      assert.equals("25283c19e5cbb9fec06d1cd41a8b6bb276858639f97a058b2c30f63c41166f28", crypto.sha256_hex(canonical))
      assert.equals("ACS3-HMAC-SHA256 Credential=STS.NTest,SignedHeaders=host;x-acs-accesskey-id;x-acs-action;"
        .. "x-acs-content-sha256;x-acs-date;x-acs-security-token;x-acs-signature-nonce;x-acs-version,"
        .. "Signature=3a65dbcd02818a3d8838a6973a780d0b3b219f64a8034bd182b5a6cb9b52e701", auth)
      assert.equals(EMPTY_SHA256, req.headers["x-acs-content-sha256"])
    end)

    it("signs a POST with a JSON body and an escaped query, with header names in any case", function()
      -- B=$(printf '%s' '{"Names":["a","b"]}' | openssl dgst -sha256 -r | cut -d' ' -f1)
      --   -> 8640edf7e14c554b8e8fa7a3ccf33161c05656269a323997504f33aa9a69f277
      -- Q='InstanceIds=%%5B%%22i-a%%22%%2C%%22i-b%%22%%5D&InstanceName=web%%2001%%2A~%%2F%%E4%%B8%%AD%%E6%%96%%87'
      -- Q+='&NextToken=&RegionId=cn-hangzhou&Tag.10.Key=env&Tag.2.Key=team'
      -- CR=$(printf "POST\n/\n$Q\ncontent-type:application/json\nhost:ecs.cn-hangzhou.aliyuncs.com\n"\
      -- 'x-acs-action:DescribeInstances\nx-acs-content-sha256:%s\nx-acs-date:2024-01-02T03:04:05Z\n'\
      -- 'x-acs-signature-nonce:nonce-j2\nx-acs-version:2014-05-26\n\ncontent-type;host;x-acs-action;'\
      -- 'x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version\n%s' $B $B)
      -- v3 "$CR" testsecret  -> 3205e5b923f44231e549c2afecf7ea835ba51fe6422753569900385c81e8e56f
      --                         8c30c9d27a8ade81a55b18bfcee1eec5e1bf64e48ae0cb1db502fef01fec8020
      local body_sha = "8640edf7e14c554b8e8fa7a3ccf33161c05656269a323997504f33aa9a69f277"
      local req = {
        method = "POST", path = "/", body = '{"Names":["a","b"]}',
        query = { RegionId = "cn-hangzhou", InstanceName = "web 01*~/" .. CHINESE, InstanceIds = '["i-a","i-b"]',
          ["Tag.2.Key"] = "team", ["Tag.10.Key"] = "env", NextToken = "" },
        headers = {
          Host = "ecs.cn-hangzhou.aliyuncs.com", ["Content-Type"] = "application/json",
          ["X-Acs-Action"] = "DescribeInstances", ["x-acs-version"] = "2014-05-26",
          ["x-acs-date"] = "2024-01-02T03:04:05Z", ["x-acs-signature-nonce"] = "nonce-j2",
        },
      }
      local auth, canonical = signer.acs3_authorization(req, "testid", "testsecret")
      assert.equals(lines {
        "POST",
        "/",
        "InstanceIds=%5B%22i-a%22%2C%22i-b%22%5D&InstanceName=web%2001%2A~%2F%E4%B8%AD%E6%96%87"
          .. "&NextToken=&RegionId=cn-hangzhou&Tag.10.Key=env&Tag.2.Key=team",
        "content-type:application/json",
        "host:ecs.cn-hangzhou.aliyuncs.com",
        "x-acs-action:DescribeInstances",
        "x-acs-content-sha256:" .. body_sha,
        "x-acs-date:2024-01-02T03:04:05Z",
        "x-acs-signature-nonce:nonce-j2",
        "x-acs-version:2014-05-26",
        "",
        "content-type;host;x-acs-action;x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version",
        body_sha,
      }, canonical)
      assert.equals("3205e5b923f44231e549c2afecf7ea835ba51fe6422753569900385c81e8e56f", crypto.sha256_hex(canonical))
      assert.equals("ACS3-HMAC-SHA256 Credential=testid,SignedHeaders=content-type;host;x-acs-action;"
        .. "x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version,"
        .. "Signature=8c30c9d27a8ade81a55b18bfcee1eec5e1bf64e48ae0cb1db502fef01fec8020", auth)
      assert.equals(body_sha, req.headers["x-acs-content-sha256"])
    end)

    it("trusts a caller's x-acs-content-sha256 (any case), trims values, upper-cases the method", function()
      -- FB='RoleArn=acs%3Aram%3A%3A1%3Arole%2Fr&RoleSessionName=s'
      -- F=$(printf '%s' "$FB" | openssl dgst -sha256 -r | cut -d' ' -f1)
      --   -> d7c1274b2e6d8dacfbe936aceae55a9a8876da4bfed2b29755df345d14585d8d
      -- CR=$(printf 'POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:sts.aliyuncs.com\n'\
      -- 'x-acs-action:AssumeRole\nx-acs-content-sha256:%s\nx-acs-date:2024-01-02T03:04:05Z\n'\
      -- 'x-acs-signature-nonce:nonce-j3\nx-acs-version:2015-04-01\n\ncontent-type;host;x-acs-action;'\
      -- 'x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version\n%s' $F $F)
      -- v3 "$CR" testsecret  -> b3cb893c734a3003441c4ade000547d807701b9c29767b20e7bfb8101734d799
      --                         81f6d28ba29b81272f9a6b80ac4e97b2aaf0e5307aa69d1590a8bde055a79735
      local form_sha = "d7c1274b2e6d8dacfbe936aceae55a9a8876da4bfed2b29755df345d14585d8d"
      local req = {
        method = "post", body = "RoleArn=acs%3Aram%3A%3A1%3Arole%2Fr&RoleSessionName=s",
        headers = {
          host = "sts.aliyuncs.com", ["content-type"] = "application/x-www-form-urlencoded",
          ["x-acs-action"] = "AssumeRole", ["x-acs-version"] = " 2015-04-01\t",
          ["x-acs-date"] = "  2024-01-02T03:04:05Z", ["x-acs-signature-nonce"] = "nonce-j3 ",
          ["X-Acs-Content-Sha256"] = form_sha,
        },
      }
      local auth, canonical = signer.acs3_authorization(req, "testid", "testsecret")
      assert.equals("b3cb893c734a3003441c4ade000547d807701b9c29767b20e7bfb8101734d799", crypto.sha256_hex(canonical))
      assert.equals("ACS3-HMAC-SHA256 Credential=testid,SignedHeaders=content-type;host;x-acs-action;"
        .. "x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version,"
        .. "Signature=81f6d28ba29b81272f9a6b80ac4e97b2aaf0e5307aa69d1590a8bde055a79735", auth)
      assert.is_nil(req.headers["x-acs-content-sha256"]) -- no second, lower-case copy was added
    end)

    it("encodes the path like the Go SDK's GetEncodePath, keeping /", function()
      -- Official: GetEncodePath("/path/ test") == "/path/%20test".
      -- CR=$(printf 'GET\n/path/%%20test\n\nhost:example.aliyuncs.com\nx-acs-action:Get\n'\
      -- 'x-acs-content-sha256:%s\nx-acs-date:2024-01-02T03:04:05Z\nx-acs-signature-nonce:nonce-j4\n'\
      -- 'x-acs-version:2020-01-01\n\nhost;x-acs-action;x-acs-content-sha256;x-acs-date;'\
      -- 'x-acs-signature-nonce;x-acs-version\n%s' $E $E)
      -- v3 "$CR" testsecret  -> 0903fad901bc54b6ba2daea3d75adab6942ac30d68d466bc5fd508cdfc63fa57
      --                         6d2dc70fce27d7e4607c55e15c88ae5c2318fb66f94f474b11546c1a28e6c6ab
      local req = {
        method = "GET", path = "/path/ test", query = {},
        headers = {
          host = "example.aliyuncs.com", ["x-acs-action"] = "Get", ["x-acs-version"] = "2020-01-01",
          ["x-acs-date"] = "2024-01-02T03:04:05Z", ["x-acs-signature-nonce"] = "nonce-j4",
        },
      }
      local auth, canonical = signer.acs3_authorization(req, "testid", "testsecret")
      assert.equals("GET\n/path/%20test\n\nhost:", canonical:sub(1, #"GET\n/path/%20test\n\nhost:"))
      assert.equals("0903fad901bc54b6ba2daea3d75adab6942ac30d68d466bc5fd508cdfc63fa57", crypto.sha256_hex(canonical))
      assert.truthy(auth:find(",Signature=6d2dc70fce27d7e4607c55e15c88ae5c2318fb66f94f474b11546c1a28e6c6ab$"))
    end)

    it("joins the sorted values of a header name given in two cases with ','", function()
      local req = { method = "GET", headers = { host = "h", ["X-Acs-Test"] = "b", ["x-acs-test"] = "a" } }
      local auth, canonical = signer.acs3_authorization(req, "id", "s")
      assert.truthy(canonical:find("\nx-acs-test:a,b\n\n", 1, true))
      assert.truthy(auth:find("SignedHeaders=host;x-acs-content-sha256;x-acs-test,", 1, true))
    end)
  end)

  describe("misuse raises, naming the caller's line", function()
    it("rejects a float, a boolean or a table as a parameter value", function()
      local err = raises(function() signer.rpc_signature("GET", { SpotPriceLimit = 0.5 }, "s") end)
      assert.truthy(err:find("signer_spec.lua:%d+: signer.rpc_signature: parameter 'SpotPriceLimit' must be"
        .. " a string or an integer, got float 0.5"))
      err = raises(function() signer.rpc_signature("GET", { DryRun = true }, "s") end)
      assert.truthy(err:find("parameter 'DryRun' must be a string or an integer, got boolean", 1, true))
      err = raises(function() signer.rpc_signature("GET", { InstanceId = { "i-a", "i-b" } }, "s") end)
      assert.truthy(err:find("got table (flatten lists and structs as Name.1", 1, true))
      err = raises(function() signer.canonical_query({ Amount = 2.0 }) end)
      assert.truthy(err:find("signer_spec.lua:%d+: signer.canonical_query: parameter 'Amount'"))
    end)

    it("rejects a list where a map of names was expected", function()
      local err = raises(function() signer.rpc_signature("GET", { "InstanceId=i-a" }, "s") end)
      assert.truthy(err:find("parameter names must be strings, got number 1", 1, true))
    end)

    it("rejects missing or mistyped arguments", function()
      assert.truthy(raises(function() signer.rpc_signature(nil, {}, "s") end):find("method must be", 1, true))
      assert.truthy(raises(function() signer.rpc_signature("GET", nil, "s") end):find("params must be", 1, true))
      assert.truthy(raises(function() signer.rpc_signature("GET", {}, nil) end):find("secret must be", 1, true))
      assert.truthy(raises(function() signer.percent_encode(1) end):find("must be a string, got number", 1, true))
      local req = { method = "GET", headers = { host = "h" } }
      assert.truthy(raises(function() signer.acs3_authorization(req, nil, "s") end)
        :find("access_key_id must be a string", 1, true))
      assert.truthy(raises(function() signer.acs3_authorization(nil, "id", "s") end):find("req must be", 1, true))
    end)

    it("requires host, string header values and a string body, and leaves req untouched when it raises", function()
      local headers = { ["x-acs-action"] = "A" }
      local err = raises(function() signer.acs3_authorization({ method = "GET", headers = headers }, "id", "s") end)
      assert.truthy(err:find("signer_spec.lua:%d+: signer.acs3_authorization: req.headers.host is required"))
      assert.is_nil(headers["x-acs-content-sha256"])

      err = raises(function()
        signer.acs3_authorization({ method = "GET", headers = { host = "h", ["x-acs-date"] = 5 } }, "id", "s")
      end)
      assert.truthy(err:find("header 'x-acs-date' must be a string, got integer", 1, true))

      err = raises(function()
        signer.acs3_authorization({ method = "POST", headers = { host = "h" }, body = {} }, "id", "s")
      end)
      assert.truthy(err:find("req.body must be a string, got table", 1, true))

      headers = { host = "h" }
      err = raises(function()
        signer.acs3_authorization({ method = "GET", headers = headers, query = { MaxResults = 1.5 } }, "id", "s")
      end)
      assert.truthy(err:find("parameter 'MaxResults' must be a string or an integer", 1, true))
      assert.is_nil(headers["x-acs-content-sha256"])
    end)
  end)
end)
