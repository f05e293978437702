-- The permission questions of composer-lsp (`session/request_permission`): the call is shown in
-- the chat and asked about with vim.ui.select; a revisable edit can be edited first in a review
-- tab (composer/review.lua, |composer-review|); a question whose turn ended is withdrawn.
-- init.lua routes the server's request here.

local Permission = {}
local H = {}

--- The permission questions being asked (keys): { co, session, title, wait, resume, review }.
H.questions = {}

--- `session/request_permission`: shows the call (its diff, or its whole command) in the chat and
--- asks with vim.ui.select, a weaker sandbox's warning first in the prompt. A revisable edit
--- (|composer-review|) also offers "Edit, then allow". Neovim runs server requests in a
--- coroutine, so this yields until the answer, or until the session's turn ends or is cancelled
--- (Permission.withdraw): the server no longer waits then, so the question is withdrawn, never re-asked.
function Permission.ask(params, ctx, chat, open_cmd)
  local co, is_main = coroutine.running()
  if not co or is_main then
    return { outcome = { outcome = 'cancelled' } }
  end
  local call = params.toolCall or {}
  if type(call.toolCallId) == 'string' then
    chat.tool(call)
  end
  chat.show(open_cmd, false) -- the diff to review
  local diff = H.revisable(params)
  local options = params.options or {}
  if diff then
    options = H.with_edit(options)
  end
  local opts = {
    prompt = H.permission_prompt(call),
    kind = 'composer_permission',
    format_item = function(option)
      return option.name
    end,
  }
  local client = ctx and vim.lsp.get_client_by_id(ctx.client_id)
  local question = { co = co, session = params.sessionId, title = call.title }
  H.questions[question] = true
  local answer = H.ask(question, diff, options, opts, client)
  H.questions[question] = nil
  return answer
end

--- Asks `question` until answered: the select, then the review for "Edit, then allow".
function H.ask(question, diff, options, opts, client)
  while true do
    local choice = H.await(question, function(resume)
      vim.ui.select(options, opts, resume)
    end)
    if choice == H.withdrawn then
      return { outcome = { outcome = 'cancelled' } }
    elseif choice ~= H.edit_option then
      return H.selected(choice)
    end
    local text = H.await(question, function(resume)
      question.review = require('composer.review').open(diff, client and client.root_dir, resume)
    end)
    question.review = nil
    if text == H.withdrawn then
      return { outcome = { outcome = 'cancelled' } }
    elseif text then
      return H.allowed(diff, text)
    end
    -- Closed unwritten: not an answer, so ask again (where dismissing the select rejects).
  end
end

--- The option that opens the review of a revisable edit. Never sent to the server: the review,
--- once written, answers allow_once.
H.edit_option = { optionId = 'composer_edit', name = 'Edit, then allow', kind = 'allow_once' }

--- The diff item of a revisable permission request: `_meta.composer.revisable` set and one diff
--- in the call's content. Nil for any other request, which then offers no editing.
---@return table?
function H.revisable(params)
  local meta = type(params._meta) == 'table' and params._meta.composer
  local call = params.toolCall
  if type(meta) ~= 'table' or meta.revisable ~= true or type(call) ~= 'table' then
    return nil
  end
  local diffs = vim.tbl_filter(function(item)
    return type(item) == 'table' and item.type == 'diff'
  end, type(call.content) == 'table' and call.content or {})
  local diff = diffs[1]
  if #diffs == 1 and type(diff.path) == 'string' and type(diff.newText) == 'string' then
    return diff
  end
end

--- `options` with the edit option after allow_once, the answer a written proposal sends; as they
--- are where there is no allow_once to send.
---@param options table[]
---@return table[]
function H.with_edit(options)
  for i, option in ipairs(options) do
    if type(option) == 'table' and option.optionId == 'allow_once' then
      local with = vim.list_slice(options)
      table.insert(with, i + 1, H.edit_option)
      return with
    end
  end
  return options
end

--- The select's prompt: what the call does, after any sandbox warning among its content.
function H.permission_prompt(call)
  local prompt = ('Composer wants to %s'):format(call.title or 'run a tool')
  for _, item in ipairs(type(call.content) == 'table' and call.content or {}) do
    local text = type(item) == 'table' and type(item.content) == 'table' and item.content.text
    if type(text) == 'string' and vim.startswith(text, 'Warning:') then
      prompt = text .. '\n' .. prompt
    end
  end
  return prompt
end

--- Runs `start(resume)` and yields the question's coroutine until `resume(value)`, or until the
--- question is withdrawn (Permission.withdraw); returns `value`, or H.withdrawn. The resume is scheduled,
--- so that a `start` calling back at once cannot resume before the yield, and counts only once
--- and only for this wait (a select answered after its question was withdrawn does nothing).
--- A `start` that fails resumes with nil rather than leaving the server waiting.
function H.await(question, start)
  local wait = {}
  question.wait = wait
  local function resume(value)
    vim.schedule(function()
      if question.wait == wait then
        question.wait = nil
        coroutine.resume(question.co, value)
      end
    end)
  end
  question.resume = resume
  local ok, err = pcall(start, resume)
  if not ok then
    H.notify(tostring(err), vim.log.levels.ERROR)
    resume(nil)
  end
  return coroutine.yield()
end

--- What a withdrawn question's wait returns.
H.withdrawn = {}

--- The session's turn ended or was cancelled: the server asks nothing any more, so its open
--- questions are settled (answered cancelled, which the server ignores) and their reviews
--- closed, telling the person that what they typed in a proposal was not applied.
---@param session_id string
---@param why string
function Permission.withdraw(session_id, why)
  for question in pairs(H.questions) do
    if question.session == session_id and question.wait then
      H.questions[question] = nil
      local what = question.title or 'a tool call'
      local message = ('%s, so its question "%s" was withdrawn'):format(why, what)
      if question.review then
        local edited = question.review.modified()
        question.review.close()
        question.review = nil
        message = ('%s; %s was not applied'):format(
          message,
          edited and 'your edit of the proposal' or 'the proposal'
        )
      end
      H.notify(message, vim.log.levels.WARN)
      question.resume(H.withdrawn)
    end
  end
end

--- The answer to a chosen permission option; no choice (the select dismissed) cancels.
function H.selected(choice)
  if type(choice) == 'table' and choice.optionId then
    return { outcome = { outcome = 'selected', optionId = choice.optionId } }
  end
  return { outcome = { outcome = 'cancelled' } }
end

--- The answer to a written proposal: allow_once, with the person's text where they changed it.
---@param diff table
---@param text string
function H.allowed(diff, text)
  local answer = H.selected({ optionId = 'allow_once' })
  if text ~= diff.newText then
    answer._meta = { composer = { revisedText = text } }
  end
  return answer
end

function H.notify(message, level)
  vim.notify('Composer: ' .. message, level)
end

return Permission
